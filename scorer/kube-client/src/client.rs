//! Builds Kubernetes clients from `--kubeconfig` or the in-cluster service account, each
//! behind its own client-side token bucket (`--kube-api-qps`, `--kube-api-burst`) like
//! client-go's: a request waits for a token before it is sent.
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

use ::kube::client::retry::RetryPolicy;
use ::kube::client::{ClientBuilder, ConfigExt, RustlsTlsError};
use ::kube::config::{KubeConfigOptions, Kubeconfig};
use ::kube::{Client, Config};
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
pub use loadstar_common::rate::RateLimit;
use loadstar_common::rate::TokenBucket;
use thiserror::Error;
use tokio::time::{Instant, Sleep};
use tower::retry::RetryLayer;
use tower::{Layer, Service, ServiceBuilder};

/// Errors building a client.
#[derive(Debug, Error)]
pub enum ClientError {
    /// The kubeconfig could not be read or used.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// Its path.
        path: String,
        /// The error.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig was given and the in-cluster configuration is unavailable.
    #[error(
        "no --kubeconfig given and not running in a cluster (KUBERNETES_SERVICE_HOST unset or \
         service account files missing): {0}"
    )]
    InCluster(#[source] kube::config::InClusterError),
    /// The HTTP client could not be built.
    #[error("building the Kubernetes client for {url}: {source}")]
    Build {
        /// API server URL.
        url: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
}

/// A tower layer that makes requests wait for a token of a shared [`TokenBucket`].
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    bucket: Arc<Mutex<TokenBucket>>,
}

impl RateLimitLayer {
    /// A layer with a fresh, full bucket.
    pub fn new(limit: RateLimit) -> RateLimitLayer {
        RateLimitLayer {
            bucket: Arc::new(Mutex::new(TokenBucket::new(
                limit,
                Instant::now().into_std(),
            ))),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;
    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: self.bucket.clone(),
            sleep: None,
            has_token: false,
        }
    }
}

/// The service of [`RateLimitLayer`]: not ready until it holds a token.
pub struct RateLimited<S> {
    inner: S,
    bucket: Arc<Mutex<TokenBucket>>,
    sleep: Option<Pin<Box<Sleep>>>,
    has_token: bool,
}

impl<S> std::fmt::Debug for RateLimited<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimited")
            .field("has_token", &self.has_token)
            .finish_non_exhaustive()
    }
}

impl<S, R> Service<R> for RateLimited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.has_token {
            if let Some(sleep) = self.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            let taken = self
                .bucket
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .try_take(Instant::now().into_std());
            match taken {
                Ok(()) => self.has_token = true,
                Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.has_token = false;
        self.inner.call(req)
    }
}

/// Loads the connection config: the kubeconfig at `path`, else in-cluster.
pub async fn load_config(path: Option<&Path>) -> Result<Config, ClientError> {
    match path {
        Some(p) => {
            let err = |source| ClientError::Kubeconfig {
                path: p.display().to_string(),
                source,
            };
            let kc = Kubeconfig::read_from(p).map_err(err)?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(err)
        }
        None => Config::incluster().map_err(ClientError::InCluster),
    }
}

/// A client for `config` with its own token bucket (`None`: unlimited).
pub fn build(config: &Config, limit: Option<RateLimit>) -> Result<Client, ClientError> {
    build_with(config, limit.map(RateLimitLayer::new).as_ref())
}

/// A client for `config` behind `limit` (a bucket it may share with other clients).
pub fn build_with(config: &Config, limit: Option<&RateLimitLayer>) -> Result<Client, ClientError> {
    let url = config.cluster_url.to_string();
    let builder = ClientBuilder::try_from(config.clone())
        .map_err(|source| ClientError::Build { url, source })?;
    Ok(match limit {
        Some(l) => builder.with_layer(l).build(),
        None => builder.build(),
    })
}

/// How often an idle HTTP/2 connection is pinged, and how long a ping may go unanswered
/// before the connection is dropped (requests then fail and are retried on a new one).
const H2_PING: (Duration, Duration) = (Duration::from_secs(30), Duration::from_secs(15));

/// A client for the scheduler's writes (bindings, Events, status patches): like [`build_with`],
/// but its requests share one HTTP/2 connection when the API server offers it (ALPN `h2`, as
/// every kube-apiserver does; client-go talks to it the same way), else HTTP/1.1. kube's own
/// connector speaks HTTP/1.1 only, one request per connection at a time: with dozens of writes
/// in flight that is dozens of TLS connections, each request its own encrypted record and
/// `writev`, where HTTP/2 puts the frames of all requests ready at once into one. Behind a
/// proxy (`proxy-url`), kube's stack is used as it is.
pub fn build_multiplexed(
    config: &Config,
    limit: Option<&RateLimitLayer>,
) -> Result<Client, ClientError> {
    if config.proxy_url.is_some() {
        return build_with(config, limit);
    }
    let err = |source| ClientError::Build {
        url: config.cluster_url.to_string(),
        source,
    };
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let tls = config.rustls_client_config().map_err(err)?;
    let mut https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = rustls_pki_types::ServerName::try_from(name.clone())
            .map_err(|e| err(kube::Error::RustlsTls(RustlsTlsError::InvalidServerName(e))))?;
        https = https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    // kube's timeouts: the connect timeout covers the TLS handshake too, and reads and
    // writes that stall are bounded (HTTP/2 pings keep an idle connection reading).
    let mut https = TimeoutConnector::new(https.enable_all_versions().wrap_connector(http));
    https.set_connect_timeout(config.connect_timeout);
    https.set_read_timeout(config.read_timeout);
    https.set_write_timeout(config.write_timeout);
    https.set_reset_reader_on_write(config.reset_reader_on_write);
    let hyper: hyper_util::client::legacy::Client<_, ::kube::client::Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            // HTTP/2's pings need a timer (hyper panics in the connection's task without one).
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .http2_keep_alive_interval(H2_PING.0)
            .http2_keep_alive_timeout(H2_PING.1)
            .http2_keep_alive_while_idle(true)
            .build(https);
    // The layers of kube's own stack, in its order (retries of 429/503/504 as kube's default
    // client makes them, each retry authenticated again), under the token bucket.
    let service = ServiceBuilder::new()
        .option_layer(limit.cloned())
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer().map_err(err)?)
        .layer(config.extra_headers_layer().map_err(err)?)
        // One error type below the optional layers, as kube's stack has.
        .map_err(|e: hyper_util::client::legacy::Error| -> BoxError { Box::new(e) })
        .service(hyper);
    Ok(Client::new(service, config.default_namespace.clone()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn layer_paces_requests() {
        struct Echo;
        impl Service<u32> for Echo {
            type Response = u32;
            type Error = std::convert::Infallible;
            type Future = std::future::Ready<Result<u32, Self::Error>>;
            fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
                Poll::Ready(Ok(()))
            }
            fn call(&mut self, x: u32) -> Self::Future {
                std::future::ready(Ok(x))
            }
        }
        let svc = Echo;
        let mut svc = RateLimitLayer::new(RateLimit {
            qps: 100.0,
            burst: 2,
        })
        .layer(svc);
        let start = Instant::now();
        for i in 0..12u32 {
            std::future::poll_fn(|cx| svc.poll_ready(cx))
                .await
                .expect("ready");
            assert_eq!(svc.call(i).await.expect("call"), i);
        }
        // 2 from the burst, then 10 at 100/s.
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(99) && took < Duration::from_millis(120),
            "{took:?}"
        );
    }
}
