//! The scorer's HTTP side port: `/metrics` (OpenMetrics for Prometheus, else text 0.0.4), `/healthz`, `/readyz` and
//! the live web view under `/ui`.
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use loadstar_store::metrics::{Metrics, Readiness};

#[derive(Clone)]
struct HttpState {
    metrics: Arc<Metrics>,
    ready: Arc<Readiness>,
}

async fn metrics_handler(
    State(s): State<HttpState>,
    headers: axum::http::HeaderMap,
) -> impl IntoResponse {
    // OpenMetrics for Prometheus (it asks), the classic text format for everyone else
    // (curl, promtool check metrics).
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let (kind, body) = loadstar_common::exposition::negotiate(accept, s.metrics.encode());
    ([(header::CONTENT_TYPE, kind)], body)
}

/// 200 `ready` or 503 `not ready`, each followed by what is failing now (a watch the
/// scorer's RBAC forbids, an unreachable API server), one line each. A replica that synced
/// stays ready while a watch retries: its cache is still served, as kube-scheduler's is.
async fn ready_handler(State(s): State<HttpState>) -> impl IntoResponse {
    let (code, mut body) = if s.ready.get() {
        (StatusCode::OK, String::from("ready\n"))
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, String::from("not ready\n"))
    };
    for p in s.ready.problems() {
        body.push_str(&p);
        body.push('\n');
    }
    (code, body)
}

/// Serves `/metrics`, `/healthz`, `/readyz` and `/ui` on `listener` until `shutdown`
/// resolves.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    ready: Arc<Readiness>,
    ui: loadstar_ui::UiState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready_handler))
        .with_state(HttpState { metrics, ready })
        .merge(loadstar_ui::router(ui));
    // The peer address tells the live view's loopback-only default who is calling.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}
