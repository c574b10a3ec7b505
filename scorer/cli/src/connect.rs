//! Reaching the scorer: plaintext or TLS (a cluster CA, optionally a client certificate),
//! with an optional bearer token (a ServiceAccount's or the operator's own), from flags or
//! the environment.
use std::path::PathBuf;
use std::time::Duration;

use loadstar_proto::pb::scorer_client::ScorerClient;
use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// Why the scorer could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// A file named by a flag could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The address is not a usable endpoint.
    #[error("scorer address {addr:?}: {message}")]
    Address {
        /// What was given.
        addr: String,
        /// Why it is unusable.
        message: String,
    },
    /// The token is not a valid header value.
    #[error("the token in {0} is not a valid header value (one line of visible ASCII)")]
    Token(PathBuf),
    /// Nothing answered.
    #[error(
        "cannot reach the scorer at {addr}: {message} (set --scorer or LOADSTAR_SCORER, or \
         `kubectl -n loadstar port-forward svc/loadstar-scorer 50051` and use the default)"
    )]
    Unreachable {
        /// Where.
        addr: String,
        /// Why.
        message: String,
    },
}

/// Where the scorer is and how to talk to it.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectArgs {
    /// The scorer's gRPC address, `host:port` (or `http://…`, `https://…`).
    #[arg(
        long,
        global = true,
        env = "LOADSTAR_SCORER",
        default_value = "127.0.0.1:50051"
    )]
    pub scorer: String,
    /// PEM CA bundle: talk TLS and trust the scorer's certificate only from it.
    #[arg(long, global = true, env = "LOADSTAR_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with --tls-key).
    #[arg(long, global = true, requires = "tls_key", env = "LOADSTAR_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, global = true, requires = "tls_cert", env = "LOADSTAR_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
    /// Name to verify the scorer's certificate against (default: the address's host).
    #[arg(long, global = true)]
    pub tls_server_name: Option<String>,
    /// File holding a bearer token sent with every call (a scorer with authentication on
    /// checks it with the API server's TokenReview).
    #[arg(long, global = true, env = "LOADSTAR_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Give up connecting or waiting for an answer after this many seconds.
    #[arg(long, global = true, default_value_t = 10.0)]
    pub timeout_seconds: f64,
}

/// Adds `authorization: Bearer …` when a token was given.
#[derive(Debug, Clone)]
pub struct Bearer(Option<MetadataValue<tonic::metadata::Ascii>>);

impl Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// A Scorer client that sends the token.
pub type Client = ScorerClient<InterceptedService<Channel, Bearer>>;

fn read(path: &PathBuf) -> Result<Vec<u8>, ConnectError> {
    std::fs::read(path).map_err(|source| ConnectError::Read {
        path: path.clone(),
        source,
    })
}

/// The URL of `addr`: kept when it has a scheme, else `https` with a CA and `http` without.
pub fn url_of(addr: &str, tls: bool) -> String {
    if addr.contains("://") {
        addr.to_string()
    } else if tls {
        format!("https://{addr}")
    } else {
        format!("http://{addr}")
    }
}

/// Connects as `args` say.
pub async fn connect(args: &ConnectArgs) -> Result<Client, ConnectError> {
    let tls = args.tls_ca.is_some() || args.scorer.starts_with("https://");
    let url = url_of(&args.scorer, tls);
    let bad = |message: String| ConnectError::Address {
        addr: args.scorer.clone(),
        message,
    };
    let timeout = Duration::from_secs_f64(args.timeout_seconds.clamp(0.1, 3600.0));
    let mut endpoint = Endpoint::from_shared(url.clone())
        .map_err(|e| bad(e.to_string()))?
        .connect_timeout(timeout)
        .timeout(timeout);
    if tls {
        let mut config = ClientTlsConfig::new();
        config = match &args.tls_ca {
            Some(ca) => config.ca_certificate(Certificate::from_pem(read(ca)?)),
            None => config.with_native_roots(),
        };
        if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
            config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        if let Some(name) = &args.tls_server_name {
            config = config.domain_name(name.clone());
        }
        endpoint = endpoint
            .tls_config(config)
            .map_err(|e| bad(e.to_string()))?;
    }
    let token = match &args.token_file {
        Some(path) => {
            let text = String::from_utf8_lossy(&read(path)?).trim().to_string();
            Some(
                format!("Bearer {text}")
                    .parse()
                    .map_err(|_| ConnectError::Token(path.clone()))?,
            )
        }
        None => None,
    };
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| ConnectError::Unreachable {
            addr: url,
            message: source_chain(&e),
        })?;
    Ok(ScorerClient::with_interceptor(channel, Bearer(token)))
}

/// An error with its sources, `a: b: c` (tonic's transport error alone says only
/// "transport error").
fn source_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut last = s.clone();
    let mut cur = e.source();
    while let Some(c) = cur {
        let part = c.to_string();
        // hyper repeats a cause's text in its wrapper; say it once.
        if !last.ends_with(&part) {
            s.push_str(": ");
            s.push_str(&part);
        }
        last = part;
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_get_the_scheme_their_security_implies() {
        assert_eq!(url_of("10.0.0.1:50051", false), "http://10.0.0.1:50051");
        assert_eq!(url_of("scorer:50051", true), "https://scorer:50051");
        assert_eq!(url_of("https://x:1", false), "https://x:1");
    }
}
