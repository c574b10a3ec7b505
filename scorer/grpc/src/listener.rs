//! The gRPC port's front door: caps the open connections and closes any connection that
//! does not finish its TLS handshake (when TLS is on) and send the HTTP/2 preface within the
//! handshake timeout, before tonic ever sees it — so idle or half-open sockets cannot pile
//! up. Each connection carries its [`PeerInfo`] (address, verified client certificate) to
//! the services. Streams within a connection, keepalive and message sizes are tonic's
//! settings (`server.rs`).
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use loadstar_auth::identity::Identity;
use loadstar_auth::tls::ServerTls;
use loadstar_store::metrics::{Metrics, ReasonLabel};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;
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

/// Who is on the other end of a connection; in every request's extensions.
#[derive(Debug, Clone, Default)]
pub struct PeerInfo {
    /// The peer's address.
    pub remote: Option<std::net::SocketAddr>,
    /// Whether the connection is TLS.
    pub tls: bool,
    /// The identity of the client certificate the handshake verified, or why the verified
    /// certificate names no user; `None`: no certificate.
    pub client: Option<Result<Identity, String>>,
}

/// The transport of a connection: plain TCP, or TLS with the preface bytes already read
/// (replayed to HTTP/2 first).
enum Io {
    Plain(TcpStream),
    Tls {
        stream: Box<TlsStream<TcpStream>>,
        preface: [u8; PREFACE.len()],
        replayed: usize,
    },
}

/// An accepted connection that sent its preface; holds its slot until dropped.
pub struct Guarded {
    io: Io,
    info: PeerInfo,
    _slot: OwnedSemaphorePermit,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Guarded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarded")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.metrics.connections.dec();
    }
}

impl Connected for Guarded {
    type ConnectInfo = PeerInfo;
    fn connect_info(&self) -> PeerInfo {
        self.info.clone()
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.io {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls {
                stream,
                preface,
                replayed,
            } => {
                if *replayed < preface.len() {
                    let n = (preface.len() - *replayed).min(buf.remaining());
                    buf.put_slice(&preface[*replayed..*replayed + n]);
                    *replayed += n;
                    return Poll::Ready(Ok(()));
                }
                Pin::new(stream.as_mut()).poll_read(cx, buf)
            }
        }
    }
}

macro_rules! both {
    ($self:ident, $s:ident => $e:expr) => {
        match &mut $self.io {
            Io::Plain($s) => $e,
            Io::Tls { stream, .. } => {
                let $s = stream.as_mut();
                $e
            }
        }
    };
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        both!(self, s => Pin::new(s).poll_write(cx, buf))
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        both!(self, s => Pin::new(s).poll_flush(cx))
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        both!(self, s => Pin::new(s).poll_shutdown(cx))
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        both!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }
    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls { stream, .. } => stream.is_write_vectored(),
        }
    }
}

/// Completes the TLS handshake and reads the HTTP/2 preface inside it; `None` if the peer
/// fails either.
async fn tls_handshake(stream: TcpStream, tls: &ServerTls, info: &mut PeerInfo) -> Option<Io> {
    let mut stream = tls.acceptor().accept(stream).await.ok()?;
    info.tls = true;
    info.client = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|leaf| Identity::from_certificate(leaf).map_err(|e| e.to_string()));
    let mut preface = [0u8; PREFACE.len()];
    stream.read_exact(&mut preface).await.ok()?;
    Some(Io::Tls {
        stream: Box::new(stream),
        preface,
        replayed: 0,
    })
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
    tls: Option<Arc<ServerTls>>,
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
            let (tx, metrics, tls) = (tx.clone(), metrics.clone(), tls.clone());
            tokio::spawn(async move {
                let mut info = PeerInfo {
                    remote: Some(peer),
                    ..PeerInfo::default()
                };
                let handshake = async {
                    match &tls {
                        None => preface_arrived(&stream)
                            .await
                            .unwrap_or(false)
                            .then_some(Io::Plain(stream)),
                        Some(tls) => tls_handshake(stream, tls, &mut info).await,
                    }
                };
                let Ok(Some(io)) = tokio::time::timeout(limits.handshake_timeout, handshake).await
                else {
                    count_closed(&metrics, "no_preface");
                    debug!(%peer, "connection closed: no TLS handshake and HTTP/2 preface in time");
                    return;
                };
                metrics.connections.inc();
                let conn = Guarded {
                    io,
                    info,
                    _slot: slot,
                    metrics,
                };
                let _ = tx.send(Ok(conn)).await;
            });
        }
    });
    ReceiverStream::new(rx)
}
