//! The gRPC port's front door: caps the open connections and closes any connection that
//! does not send the HTTP/2 preface within the handshake timeout, before tonic ever sees
//! it — so idle or half-open sockets cannot pile up. Streams within a connection, keepalive
//! and message sizes are tonic's settings (`server.rs`).
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use loadstar_store::metrics::{Metrics, ReasonLabel};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tracing::{debug, warn};

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Connection limits; see [`ConnectionLimits::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Most open connections (including ones still in their handshake); more are closed on
    /// accept.
    pub max_connections: usize,
    /// A connection must send the whole HTTP/2 preface within this, or it is closed.
    pub handshake_timeout: Duration,
}

impl Default for ConnectionLimits {
    /// 20 000 connections (one per agent per replica, so ≥ a 15 000-node cluster plus
    /// clients), a 5 s handshake (a real client sends the preface in its first packet).
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 20_000,
            handshake_timeout: Duration::from_secs(5),
        }
    }
}

/// An accepted connection that sent its preface; holds its slot until dropped.
#[derive(Debug)]
pub struct Guarded {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    metrics: Arc<Metrics>,
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.metrics.connections.dec();
    }
}

impl Connected for Guarded {
    type ConnectInfo = TcpConnectInfo;
    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Waits until the peer has sent the full preface (`false`: it closed first).
async fn preface_arrived(stream: &TcpStream) -> io::Result<bool> {
    let mut buf = [0u8; PREFACE.len()];
    loop {
        let n = stream.peek(&mut buf).await?;
        if n == 0 {
            return Ok(false);
        }
        if n == PREFACE.len() {
            // Anything else than the preface is refused by HTTP/2 itself, with a GOAWAY.
            return Ok(true);
        }
        // Part of it: the rest is on its way.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn count_closed(metrics: &Metrics, reason: &str) {
    metrics
        .connections_closed
        .get_or_create(&ReasonLabel {
            reason: reason.into(),
        })
        .inc();
}

/// The accepted, handshaken connections of `listener`, for
/// `Server::serve_with_incoming_shutdown`. The accept loop ends when the server drops the
/// stream.
pub fn incoming(
    listener: TcpListener,
    limits: ConnectionLimits,
    metrics: Arc<Metrics>,
) -> ReceiverStream<io::Result<Guarded>> {
    let (tx, rx) = mpsc::channel::<io::Result<Guarded>>(64);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = tx.closed() => return,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors or similar: back off instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                count_closed(&metrics, "limit");
                debug!(%peer, "connection refused: connection limit");
                continue;
            };
            let _ = stream.set_nodelay(true);
            let (tx, metrics) = (tx.clone(), metrics.clone());
            tokio::spawn(async move {
                let ok = tokio::time::timeout(limits.handshake_timeout, preface_arrived(&stream))
                    .await
                    .is_ok_and(|r| r.unwrap_or(false));
                if !ok {
                    count_closed(&metrics, "no_preface");
                    debug!(%peer, "connection closed: no HTTP/2 preface in time");
                    return;
                }
                metrics.connections.inc();
                let conn = Guarded {
                    stream,
                    _slot: slot,
                    metrics,
                };
                let _ = tx.send(Ok(conn)).await;
            });
        }
    });
    ReceiverStream::new(rx)
}
