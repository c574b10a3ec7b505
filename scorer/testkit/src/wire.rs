//! Raw gRPC over HTTP/2 for the clients that bypass tonic on purpose: hostile ones that open
//! calls and never read them (tests and `loadstar-attack`).
use bytes::Bytes;
use loadstar_proto::pb;
use prost::Message;
use tokio::net::TcpStream;

/// Errors of the raw clients.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The TCP connection failed.
    #[error("connecting to {host}: {source}")]
    Connect {
        /// The address.
        host: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// HTTP/2 failed.
    #[error("HTTP/2: {0}")]
    Http2(#[from] h2::Error),
    /// A request could not be built.
    #[error("building a request: {0}")]
    Request(#[from] http::Error),
}

/// A gRPC request body: the 5-byte length prefix, then the message.
pub fn grpc_frame(msg: &impl Message) -> Bytes {
    let body = msg.encode_to_vec();
    let mut out = Vec::with_capacity(body.len() + 5);
    out.push(0);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    Bytes::from(out)
}

/// Opens `count` `WatchNodes` calls on ONE HTTP/2 connection to `host` (`127.0.0.1:PORT`)
/// and never reads them. Calls beyond the server's SETTINGS_MAX_CONCURRENT_STREAMS wait in
/// the client. Returns the client (for `current_max_send_streams`), the held calls, and
/// the connection task.
pub async fn unread_watch_calls(
    host: &str,
    count: usize,
) -> Result<
    (
        h2::client::SendRequest<Bytes>,
        Vec<h2::client::ResponseFuture>,
        tokio::task::JoinHandle<Result<(), h2::Error>>,
    ),
    WireError,
> {
    let tcp = TcpStream::connect(host)
        .await
        .map_err(|source| WireError::Connect {
            host: host.to_string(),
            source,
        })?;
    let (client, conn) = h2::client::handshake(tcp).await?;
    let conn = tokio::spawn(conn);
    let mut held = Vec::with_capacity(count);
    for _ in 0..count {
        let mut c = client.clone().ready().await?;
        let req = http::Request::post(format!("http://{host}/loadstar.v1.Scorer/WatchNodes"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())?;
        let (resp, mut body) = c.send_request(req, false)?;
        body.send_data(grpc_frame(&pb::WatchNodesRequest::default()), true)?;
        held.push(resp);
    }
    Ok((client, held, conn))
}
