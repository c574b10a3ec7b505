//! The StepScaler validating admission webhook over HTTPS: `POST /validate-stepscaler` with an
//! `AdmissionReview`, answered by [`loadstar_autoscale::admission::review`]. The API server
//! calls webhooks without a client certificate, so this port has none of the metrics API's
//! front-proxy check; it only judges StepScaler specs and reveals nothing.
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use loadstar_auth::tls::{ServerTls, TlsFiles};
use loadstar_extender::tls::TlsListener;
use loadstar_store::metrics::Metrics;
use tracing::{debug, info, warn};

use crate::server::MetricsApiError;

/// The largest review accepted (a StepScaler is a few hundred bytes; the review carries the
/// old and new object).
const BODY_LIMIT: usize = 256 * 1024;

/// Settings of the webhook port.
#[derive(Debug, Clone)]
pub struct AdmissionConfig {
    /// HTTPS address.
    pub listen: SocketAddr,
    /// Serving certificate (PEM); the webhook configuration's `caBundle` signs it.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
}

async fn validate(body: Bytes) -> Response {
    match loadstar_autoscale::admission::review(&body) {
        Ok(answer) => {
            if answer["response"]["allowed"] == false {
                debug!(message = %answer["response"]["status"]["message"], "StepScaler refused");
            }
            let bytes = serde_json::to_vec(&answer).unwrap_or_default();
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                bytes,
            )
                .into_response()
        }
        Err(e) => (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    }
}

/// The webhook's routes.
pub fn router() -> Router {
    Router::new()
        .route("/validate-stepscaler", post(validate))
        .route("/healthz", get(|| async { "ok" }))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
}

/// Serves the webhook until `shutdown` resolves.
pub async fn start(
    config: AdmissionConfig,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<tokio::task::JoinHandle<()>, MetricsApiError> {
    let tls = Arc::new(ServerTls::load(
        TlsFiles {
            cert: config.cert,
            key: config.key,
            client_ca: None,
            require_client_cert: false,
        },
        &[b"http/1.1"],
        metrics,
    )?);
    let reload = tls.watch(std::time::Duration::from_secs(30));
    let listen_err = |e: std::io::Error| MetricsApiError::Listen {
        addr: config.listen,
        reason: e.to_string(),
    };
    let tcp = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(listen_err)?;
    let listener = TlsListener::new(tcp, tls).map_err(listen_err)?;
    info!(listen = %config.listen, "StepScaler admission webhook serving");
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router())
            .with_graceful_shutdown(shutdown)
            .await
        {
            warn!(error = %e, "admission webhook stopped");
        }
        reload.abort();
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::{Body, to_bytes};
    use axum::http::Request;
    use tower::ServiceExt;

    async fn call(body: &str) -> (StatusCode, String) {
        let req = Request::post("/validate-stepscaler")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .expect("request");
        let resp = router().oneshot(req).await.expect("answer");
        let status = resp.status();
        let bytes = to_bytes(resp.into_body(), usize::MAX).await.expect("body");
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn refuses_floor_above_ceiling_and_garbage() {
        let review = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","object":{"spec":{"scaleTargetRef":{"apiVersion":"apps/v1","kind":"Deployment","name":"w"},"targetUtilizationPercent":60,"minReplicas":4,"maxReplicas":2}}}}"#;
        let (status, body) = call(review).await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            body.contains(r#""allowed":false"#) && body.contains("4 is above maxReplicas 2"),
            "{body}"
        );
        let (status, body) = call("garbage").await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        let (status, _) = call(&"x".repeat(BODY_LIMIT + 1)).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    }
}
