//! The scorer's live web view at `/ui` on its metrics port: every node as a tile coloured by
//! its real load, each node's windows, the latest placement decisions with every candidate's
//! per-plugin scores and the filters' reasons, and the profiles. The page, script and style
//! are embedded in the binary (no CDN, works air-gapped); data comes as JSON and as a
//! server-sent event stream (`/ui/events`) that pushes a node frame when the store changes
//! and the decisions recorded since the last push.
pub mod view;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::{Stream, StreamExt};
use loadstar_policy::profiles::Profiles;
use loadstar_store::NodeStore;
use loadstar_store::decisions::DecisionLog;
use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// Who may open the view: it lists every node and the pods of every namespace, while the
/// port it shares with `/metrics` is usually open to the cluster's Prometheus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UiAccess {
    /// Not served.
    Off,
    /// Only callers on loopback: this machine, or `kubectl port-forward` (whose traffic
    /// reaches the pod from 127.0.0.1 inside it).
    #[default]
    Loopback,
    /// Anyone who reaches the port.
    Open,
}

/// Limits of the web view; see [`UiConfig::default`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UiConfig {
    /// Who may open it.
    pub access: UiAccess,
    /// How often an event stream looks for changes.
    pub tick: Duration,
    /// Event streams open at once; more are answered 503.
    pub max_streams: usize,
    /// Most decisions one push or one `/ui/api/decisions` answer carries.
    pub max_decisions: usize,
}

impl Default for UiConfig {
    /// Loopback callers only, a push per second at most, 32 open pages, 200 decisions per
    /// push.
    fn default() -> Self {
        UiConfig {
            access: UiAccess::Loopback,
            tick: Duration::from_secs(1),
            max_streams: 32,
            max_decisions: 200,
        }
    }
}

/// What the view reads.
#[derive(Debug, Clone)]
pub struct UiState {
    store: Arc<NodeStore>,
    profiles: Arc<Profiles>,
    decisions: Arc<DecisionLog>,
    streams: Arc<Semaphore>,
    config: UiConfig,
}

impl UiState {
    /// A view over `store`, `profiles` and `decisions`.
    pub fn new(
        store: Arc<NodeStore>,
        profiles: Arc<Profiles>,
        decisions: Arc<DecisionLog>,
        config: UiConfig,
    ) -> UiState {
        UiState {
            store,
            profiles,
            decisions,
            streams: Arc::new(Semaphore::new(config.max_streams)),
            config,
        }
    }
}

/// The `/ui` routes, to merge into the metrics port's router (served with
/// `into_make_service_with_connect_info::<SocketAddr>()`, so that loopback callers are
/// recognised; without it, [`UiAccess::Loopback`] refuses everyone).
pub fn router(state: UiState) -> Router {
    if state.config.access == UiAccess::Off {
        return Router::new();
    }
    let access = state.config.access;
    Router::new()
        .route("/ui", get(|| async { page(INDEX_HTML, "text/html") }))
        .route("/ui/", get(|| async { page(INDEX_HTML, "text/html") }))
        .route(
            "/ui/app.js",
            get(|| async { page(APP_JS, "text/javascript") }),
        )
        .route("/ui/app.css", get(|| async { page(APP_CSS, "text/css") }))
        .route("/ui/api/nodes", get(nodes))
        .route("/ui/api/nodes/{name}", get(node))
        .route("/ui/api/decisions", get(decisions))
        .route("/ui/api/profiles", get(profiles))
        .route("/ui/events", get(events))
        .with_state(state)
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| async move {
                if allowed(access, &req) {
                    next.run(req).await
                } else {
                    (
                        StatusCode::FORBIDDEN,
                        "the live view answers loopback callers only: open it through \
                         `kubectl port-forward` (or on this machine), or start the scorer with \
                         --ui-access=open\n",
                    )
                        .into_response()
                }
            },
        ))
}

/// Whether `access` lets the caller of `req` in.
fn allowed(access: UiAccess, req: &axum::extract::Request) -> bool {
    match access {
        UiAccess::Off => false,
        UiAccess::Open => true,
        UiAccess::Loopback => req
            .extensions()
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .is_some_and(|c| c.0.ip().is_loopback()),
    }
}

fn page(body: &'static str, kind: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, format!("{kind}; charset=utf-8")),
            (header::CACHE_CONTROL, "no-cache".to_string()),
            // Everything is served from here: no inline script, no third party.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data:".to_string(),
            ),
        ],
        body,
    )
        .into_response()
}

fn json(value: &impl serde::Serialize) -> Response {
    match serde_json::to_string(value) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("could not encode the answer: {e}\n"),
        )
            .into_response(),
    }
}

async fn nodes(State(s): State<UiState>) -> Response {
    json(&view::nodes_frame(&s.store.snapshot()))
}

async fn node(State(s): State<UiState>, Path(name): Path<String>) -> Response {
    match view::node_detail(&s.store.snapshot(), &name) {
        Some(d) => json(&d),
        None => (
            StatusCode::NOT_FOUND,
            format!("node {name:?} is not known to this scorer\n"),
        )
            .into_response(),
    }
}

/// `?after=SEQ&limit=N`.
#[derive(Debug, Deserialize)]
struct DecisionQuery {
    #[serde(default)]
    after: u64,
    #[serde(default)]
    limit: Option<usize>,
}

async fn decisions(State(s): State<UiState>, Query(q): Query<DecisionQuery>) -> Response {
    let limit = q
        .limit
        .unwrap_or(s.config.max_decisions)
        .min(s.config.max_decisions);
    let list: Vec<view::DecisionView> = s
        .decisions
        .latest(limit, q.after)
        .iter()
        .map(view::decision_view)
        .collect();
    json(&list)
}

async fn profiles(State(s): State<UiState>) -> Response {
    let list: Vec<view::ProfileView> = s.profiles.iter().map(|p| view::profile_view(p)).collect();
    json(&list)
}

async fn events(State(s): State<UiState>) -> Response {
    let Ok(permit) = s.streams.clone().try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{} live views are open, the limit; close one or poll /ui/api/nodes\n",
                s.config.max_streams
            ),
        )
            .into_response();
    };
    Sse::new(event_stream(s, permit))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Every tick: a `nodes` event when the store changed since the last one, a `decisions`
/// event with what was recorded since the last one. The permit is held while the page is
/// open.
fn event_stream(
    s: UiState,
    permit: OwnedSemaphorePermit,
) -> impl Stream<Item = Result<Event, Infallible>> {
    struct Cursor {
        s: UiState,
        generation: Option<u64>,
        seq: u64,
        first: bool,
        _permit: OwnedSemaphorePermit,
    }
    let cursor = Cursor {
        s,
        generation: None,
        seq: 0,
        first: true,
        _permit: permit,
    };
    futures::stream::unfold(cursor, |mut c| async move {
        loop {
            if !c.first {
                tokio::time::sleep(c.s.config.tick).await;
            }
            c.first = false;
            let mut events = Vec::new();
            let snap = c.s.store.snapshot();
            if c.generation != Some(snap.generation) {
                c.generation = Some(snap.generation);
                match serde_json::to_string(&view::nodes_frame(&snap)) {
                    Ok(data) => events.push(Event::default().event("nodes").data(data)),
                    Err(e) => tracing::warn!(error = %e, "could not encode a node frame"),
                }
            }
            let new = c.s.decisions.latest(c.s.config.max_decisions, c.seq);
            if let Some(top) = new.first() {
                c.seq = top.seq;
                let list: Vec<view::DecisionView> = new.iter().map(view::decision_view).collect();
                match serde_json::to_string(&list) {
                    Ok(data) => events.push(Event::default().event("decisions").data(data)),
                    Err(e) => tracing::warn!(error = %e, "could not encode decisions"),
                }
            }
            if !events.is_empty() {
                let stream = futures::stream::iter(events.into_iter().map(Ok));
                return Some((stream, c));
            }
        }
    })
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use http::Request;
    use loadstar_store::StoreConfig;
    use tower::ServiceExt;

    fn state(streams: usize) -> UiState {
        let store = Arc::new(NodeStore::new(StoreConfig::default()));
        let profiles = Arc::new(Profiles::new(
            loadstar_policy::config::ScorerConfig::embedded_default()
                .build_profiles()
                .expect("embedded profiles build"),
        ));
        UiState::new(
            store,
            profiles,
            Arc::new(DecisionLog::default()),
            UiConfig {
                max_streams: streams,
                tick: Duration::from_millis(10),
                ..UiConfig::default()
            },
        )
    }

    fn request(path: &str, peer: &str) -> Request<Body> {
        let mut r = Request::builder()
            .uri(path)
            .body(Body::empty())
            .expect("request");
        let addr: std::net::SocketAddr = peer.parse().expect("address");
        r.extensions_mut().insert(axum::extract::ConnectInfo(addr));
        r
    }

    async fn get(app: &Router, path: &str) -> (StatusCode, String, String) {
        get_from(app, path, "127.0.0.1:40000").await
    }

    async fn get_from(app: &Router, path: &str, peer: &str) -> (StatusCode, String, String) {
        let resp = app
            .clone()
            .oneshot(request(path, peer))
            .await
            .expect("infallible");
        let status = resp.status();
        let kind = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let body = if kind.starts_with("text/event-stream") {
            String::new()
        } else {
            let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
                .await
                .expect("body");
            String::from_utf8_lossy(&bytes).into_owned()
        };
        (status, kind, body)
    }

    #[tokio::test]
    async fn serves_the_embedded_page_and_its_json() {
        let app = router(state(2));
        let (status, kind, body) = get(&app, "/ui").await;
        assert_eq!(status, StatusCode::OK);
        assert!(kind.starts_with("text/html"));
        assert!(
            body.contains("app.js") && !body.contains("http://") && !body.contains("https://"),
            "the page loads nothing from elsewhere"
        );
        let (_, kind, js) = get(&app, "/ui/app.js").await;
        assert!(kind.starts_with("text/javascript") && js.contains("EventSource"));
        let (status, _, nodes) = get(&app, "/ui/api/nodes").await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            nodes.contains("\"resources\":[\"cpu\",\"memory\""),
            "{nodes}"
        );
        let (status, _, profiles) = get(&app, "/ui/api/profiles").await;
        assert_eq!(status, StatusCode::OK);
        assert!(profiles.contains("\"filters\""), "{profiles}");
        let (status, _, body) = get(&app, "/ui/api/nodes/nope").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(body.contains("\"nope\""));
        let (status, _, body) = get(&app, "/ui/api/decisions?after=0&limit=5").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "[]"));
        let (status, _, _) = get(&app, "/ui/api/decisions?after=minus").await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn only_loopback_callers_get_the_view_unless_it_is_open() {
        let app = router(state(2));
        let (status, _, body) = get_from(&app, "/ui/api/nodes", "10.1.2.3:5000").await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert!(body.contains("kubectl port-forward"), "{body}");
        let (status, _, _) = get_from(&app, "/ui", "[::1]:5000").await;
        assert_eq!(status, StatusCode::OK);
        // No connection info (served without it): refused rather than guessed.
        let resp = app
            .clone()
            .oneshot(Request::get("/ui").body(Body::empty()).expect("request"))
            .await
            .expect("infallible");
        assert_eq!(resp.status(), StatusCode::FORBIDDEN);
        let mut open = state(2);
        open.config.access = UiAccess::Open;
        let (status, _, _) = get_from(&router(open), "/ui", "10.1.2.3:5000").await;
        assert_eq!(status, StatusCode::OK);
        let mut off = state(2);
        off.config.access = UiAccess::Off;
        let (status, _, _) = get(&router(off), "/ui").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn event_streams_beyond_the_limit_are_refused() {
        let app = router(state(1));
        let first = app
            .clone()
            .oneshot(request("/ui/events", "[::1]:5000"))
            .await
            .expect("infallible");
        assert_eq!(first.status(), StatusCode::OK);
        let (status, _, body) = get(&app, "/ui/events").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("1 live views are open"), "{body}");
        drop(first);
        let (status, kind, _) = get(&app, "/ui/events").await;
        assert_eq!(status, StatusCode::OK, "a closed page frees its slot");
        assert!(kind.starts_with("text/event-stream"));
    }

    #[tokio::test]
    async fn the_stream_pushes_a_frame_then_only_what_changed() {
        use futures::StreamExt;
        let s = state(1);
        let permit = s.streams.clone().try_acquire_owned().expect("a slot");
        let stream = event_stream(s.clone(), permit);
        futures::pin_mut!(stream);
        // The first event is the node frame (nothing recorded yet, so no decisions).
        let first = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("a first event")
            .expect("stream open");
        assert!(first.is_ok());
        // Nothing changes: nothing is pushed.
        assert!(
            tokio::time::timeout(Duration::from_millis(100), stream.next())
                .await
                .is_err()
        );
    }
}
