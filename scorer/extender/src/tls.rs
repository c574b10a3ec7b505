//! HTTPS for the extender port: handshakes run off the accept loop with a deadline so one
//! slow client cannot hold up the others, and the streams handed to axum through its
//! `Listener` trait. The certificate (and an optional client CA, for kube-scheduler's client
//! certificate) come from `loadstar_auth::tls::ServerTls`, which follows rotation.
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use loadstar_auth::tls::ServerTls;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tracing::debug;

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepted, handshaken TLS connections, for `axum::serve`.
pub struct TlsListener {
    rx: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `tcp`, handshaking each connection in its own task.
    pub fn new(tcp: TcpListener, tls: Arc<ServerTls>) -> std::io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        debug!(error = %e, "extender accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (acceptor, out) = (tls.acceptor(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = out.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => debug!(%peer, error = %e, "extender TLS handshake failed"),
                        Err(_) => debug!(%peer, "extender TLS handshake timed out"),
                    }
                });
                if tx.is_closed() {
                    return;
                }
            }
        });
        Ok(TlsListener { rx, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The accept loop only ends when this listener is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
