//! What can go wrong while reporting, with the scorer, host or file concerned: one error type
//! for the whole reporter, so the daemon has one thing to show when starting it fails.
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use thiserror::Error;

/// Errors of the reporting module.
#[derive(Debug, Error)]
pub enum ReportError {
    /// A `--scorer` value is not a usable URI.
    #[error("scorer {target:?}: {reason}")]
    InvalidTarget {
        /// The value given.
        target: String,
        /// What is wrong.
        reason: String,
    },
    /// The CA file could not be read.
    #[error("reading TLS CA {path}: {source}")]
    TlsCa {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The bearer token file could not be read or is not a valid header value.
    #[error("bearer token {path}: {reason}")]
    Token {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The endpoint could not be configured (e.g. TLS).
    #[error("configuring endpoint for {scorer}: {source}")]
    Endpoint {
        /// The scorer address.
        scorer: SocketAddr,
        /// tonic's error.
        #[source]
        source: tonic::transport::Error,
    },
    /// Connecting failed.
    #[error("connecting to {scorer}: {source}")]
    Connect {
        /// The scorer address.
        scorer: SocketAddr,
        /// tonic's error.
        #[source]
        source: tonic::transport::Error,
    },
    /// The stream failed.
    #[error("stream to {scorer}: {source}")]
    Stream {
        /// The scorer address.
        scorer: SocketAddr,
        /// The gRPC status.
        #[source]
        source: tonic::Status,
    },
    /// Resolving a scorer name failed.
    #[error("resolving {host}: {source}")]
    Resolve {
        /// The host name.
        host: String,
        /// The resolver's error.
        #[source]
        source: io::Error,
    },
}
