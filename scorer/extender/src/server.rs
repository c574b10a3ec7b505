//! The extender's HTTP side: `POST /extender/v1/{profile}/filter` and `/prioritize` (and
//! `/bind`, answered with a clear refusal), over a request body read with a size cap and a
//! deadline, a bound on the bytes of all bodies held at once (taken before a body is read),
//! a bound on calls in flight, and a `loadstar_scorer_extender_*` metric per call.
//! Bad input gets a 4xx with a one-line JSON error (kube-scheduler logs it); nothing panics.
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::to_bytes;
use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use loadstar_framework::Profile;
use loadstar_framework::snapshot::PodInfo;
use loadstar_store::NodeStore;
use loadstar_store::cluster::PodDecoder;
use loadstar_store::metrics::{Metrics, VerbLabel, VerbResultLabel};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use serde::Serialize;
use tokio::sync::{Semaphore, SemaphorePermit};
use tracing::{debug, warn};

use crate::verdict::{self, load_view};
use crate::wire::{ExtenderArgs, ExtenderFilterResult, HostPriority, NodeList};

/// What the endpoint accepts; see [`ExtenderLimits::default`].
#[derive(Debug, Clone, Copy)]
pub struct ExtenderLimits {
    /// Largest request body, bytes.
    pub max_body_bytes: usize,
    /// The whole body must arrive within this.
    pub body_timeout: Duration,
    /// Calls evaluated at once; more wait up to `queue_timeout`, then get 503.
    pub max_in_flight: usize,
    /// How long a call waits for a slot (or for room in `max_buffered_bytes`).
    pub queue_timeout: Duration,
    /// Bytes of request bodies held at once, from before the first byte is read until the
    /// answer: each call reserves its `Content-Length` (the whole `max_body_bytes` when it
    /// declares none) in MiB, waiting up to `queue_timeout` for room, then gets 503.
    pub max_buffered_bytes: usize,
}

impl Default for ExtenderLimits {
    /// 64 MiB bodies (a names-only request for 100 000 nodes is ~3 MiB; whole Node objects
    /// for 10 000 nodes fit), 10 s to send them, 16 calls evaluated at once, 5 s queueing,
    /// 256 MiB of bodies held at once (four of the largest; kube-scheduler sends one call at
    /// a time per scheduling cycle).
    fn default() -> Self {
        ExtenderLimits {
            max_body_bytes: 64 << 20,
            body_timeout: Duration::from_secs(10),
            max_in_flight: 16,
            queue_timeout: Duration::from_secs(5),
            max_buffered_bytes: 256 << 20,
        }
    }
}

/// The unit of the body budget, bytes.
const BUDGET_UNIT: usize = 1 << 20;

fn budget_units(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(BUDGET_UNIT).max(1)).unwrap_or(u32::MAX)
}

/// A read and decoded call, holding its share of the body budget until it is dropped.
struct Call<'a> {
    profiles: &'a (Profile, Profile),
    pod: PodInfo,
    args: ExtenderArgs,
    names: Vec<String>,
    _budget: SemaphorePermit<'a>,
}

/// The extender: the node store, one load-only profile per configured profile
/// ([`verdict::load_profile`]), and a reader of whole pods.
pub struct Extender {
    store: Arc<NodeStore>,
    /// Per profile: the load-aware filters alone (for `filter`) and the load-aware scores
    /// alone (for `prioritize`: kube-scheduler sends it the nodes that passed every filter,
    /// the extender's included).
    profiles: HashMap<String, (Profile, Profile)>,
    default_profile: String,
    decoder: Arc<dyn PodDecoder>,
    metrics: Arc<Metrics>,
    limits: ExtenderLimits,
    slots: Semaphore,
    /// [`ExtenderLimits::max_buffered_bytes`] in [`BUDGET_UNIT`]s.
    budget: Semaphore,
}

impl std::fmt::Debug for Extender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extender")
            .field("profiles", &self.profiles.keys().collect::<Vec<_>>())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Extender {
    /// An extender over `store` answering with `profiles` (cut to their load-aware plugins;
    /// the first is used for the path segment `default`). `filter_profiles` are the same
    /// profiles built a second time (plugins are not cloneable): they answer `filter`,
    /// without their scores.
    pub fn new(
        store: Arc<NodeStore>,
        profiles: Vec<Profile>,
        filter_profiles: Vec<Profile>,
        decoder: Arc<dyn PodDecoder>,
        metrics: Arc<Metrics>,
        limits: ExtenderLimits,
    ) -> Extender {
        let default_profile = profiles.first().map(|p| p.name.clone()).unwrap_or_default();
        let mut filter_only: HashMap<String, Profile> = filter_profiles
            .into_iter()
            .map(|mut p| {
                p.scores.clear();
                (p.name.clone(), verdict::load_profile(p))
            })
            .collect();
        Extender {
            store,
            profiles: profiles
                .into_iter()
                .filter_map(|p| {
                    let f = filter_only.remove(&p.name)?;
                    let mut scores = verdict::load_profile(p);
                    scores.filters.clear();
                    Some((scores.name.clone(), (f, scores)))
                })
                .collect(),
            default_profile,
            decoder,
            metrics,
            slots: Semaphore::new(limits.max_in_flight.max(1)),
            budget: Semaphore::new(budget_units(limits.max_buffered_bytes) as usize),
            limits,
        }
    }
}

/// A refusal: status, metric result label, message.
struct Refusal(StatusCode, &'static str, String);

#[derive(Serialize)]
struct ErrorBody {
    #[serde(rename = "Error")]
    error: String,
}

fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

impl Extender {
    fn count(&self, verb: &str, result: &str) {
        self.metrics
            .extender_requests
            .get_or_create(&VerbResultLabel {
                verb: verb.to_string(),
                result: result.to_string(),
            })
            .inc();
    }

    /// Reserves room for a body of `bytes` in the budget, or refuses the call.
    async fn reserve(&self, bytes: usize) -> Result<SemaphorePermit<'_>, Refusal> {
        let units = budget_units(bytes).min(budget_units(self.limits.max_buffered_bytes));
        match tokio::time::timeout(self.limits.queue_timeout, self.budget.acquire_many(units)).await
        {
            Ok(Ok(p)) => Ok(p),
            _ => Err(Refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                format!(
                    "{} bytes of request bodies are held already; no room for {bytes} more \
                     within {:?}",
                    self.limits.max_buffered_bytes, self.limits.queue_timeout
                ),
            )),
        }
    }

    /// Reads and decodes a request: the profile, the pod (load view) and the node names.
    async fn read(&self, profile: &str, req: Request) -> Result<Call<'_>, Refusal> {
        let name = if profile == "default" {
            self.default_profile.as_str()
        } else {
            profile
        };
        let Some(p) = self.profiles.get(name) else {
            let mut known: Vec<&str> = self.profiles.keys().map(String::as_str).collect();
            known.sort_unstable();
            return Err(Refusal(
                StatusCode::NOT_FOUND,
                "unknown_profile",
                format!(
                    "no profile {}; known: {}",
                    loadstar_common::text::quote(name),
                    known.join(", ")
                ),
            ));
        };
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        if let Some(n) = declared.filter(|&n| n > self.limits.max_body_bytes) {
            return Err(Refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!(
                    "request body of {n} bytes is over {} bytes",
                    self.limits.max_body_bytes
                ),
            ));
        }
        let limit = declared.unwrap_or(self.limits.max_body_bytes);
        let budget = self.reserve(limit).await?;
        let body = req.into_body();
        let bytes =
            match tokio::time::timeout(self.limits.body_timeout, to_bytes(body, limit)).await {
                Err(_) => {
                    return Err(Refusal(
                        StatusCode::REQUEST_TIMEOUT,
                        "timeout",
                        format!(
                            "request body not received within {:?}",
                            self.limits.body_timeout
                        ),
                    ));
                }
                Ok(Err(e)) => {
                    return Err(Refusal(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "too_large",
                        format!("request body unreadable or over {limit} bytes: {e}"),
                    ));
                }
                Ok(Ok(b)) => b,
            };
        let bad = |m: String| Refusal(StatusCode::BAD_REQUEST, "bad_request", m);
        let mut args: ExtenderArgs = serde_json::from_slice(&bytes)
            .map_err(|e| bad(format!("not ExtenderArgs JSON: {e}")))?;
        let sent_names = args.node_names.is_some();
        let names = args.take_names().map_err(bad)?;
        if sent_names {
            // Remember the form of the request: names in, names out.
            args.node_names = Some(Vec::new());
        }
        if args.pod.is_null() {
            return Err(bad("ExtenderArgs has no Pod".into()));
        }
        let pod = self
            .decoder
            .decode(&args.pod.to_string())
            .map_err(|e| bad(format!("Pod: {e}")))?;
        Ok(Call {
            profiles: p,
            pod: load_view(pod),
            args,
            names,
            _budget: budget,
        })
    }

    /// Waits for an evaluation slot.
    async fn slot(&self) -> Result<tokio::sync::SemaphorePermit<'_>, Refusal> {
        match tokio::time::timeout(self.limits.queue_timeout, self.slots.acquire()).await {
            Ok(Ok(p)) => Ok(p),
            _ => Err(Refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                format!(
                    "{} calls in flight; none finished within {:?}",
                    self.limits.max_in_flight, self.limits.queue_timeout
                ),
            )),
        }
    }

    async fn filter(&self, profile: &str, req: Request) -> Result<Response, Refusal> {
        let call = self.read(profile, req).await?;
        let (p, pod, args, names) = (call.profiles, &call.pod, call.args, &call.names);
        let _slot = self.slot().await?;
        let snap = self.store.snapshot();
        let mut rng = SmallRng::from_rng(&mut rand::rng());
        let v = verdict::filter(&p.0, &snap, pod, names, &mut rng);
        let passed_names: Vec<&str> = v.passed.iter().map(|&i| names[i].as_str()).collect();
        let result = match args.nodes {
            Some(list) if args.node_names.is_none() => {
                let items = v
                    .passed
                    .iter()
                    .filter_map(|&i| list.items.get(i).cloned())
                    .collect();
                ExtenderFilterResult {
                    nodes: Some(NodeList { items }),
                    node_names: None,
                    failed_nodes: v.failed,
                    error: String::new(),
                }
            }
            _ => ExtenderFilterResult {
                nodes: None,
                node_names: Some(passed_names),
                failed_nodes: v.failed,
                error: String::new(),
            },
        };
        debug!(pod = %format!("{}/{}", pod.namespace, pod.name), nodes = names.len(),
               failed = result.failed_nodes.len(), "extender filter");
        Ok(json_response(StatusCode::OK, &result))
    }

    async fn prioritize(&self, profile: &str, req: Request) -> Result<Response, Refusal> {
        let call = self.read(profile, req).await?;
        let (p, pod, names) = (call.profiles, &call.pod, &call.names);
        let _slot = self.slot().await?;
        let snap = self.store.snapshot();
        let mut rng = SmallRng::from_rng(&mut rand::rng());
        let list: Vec<HostPriority> = verdict::prioritize(&p.1, &snap, pod, names, &mut rng)
            .into_iter()
            .map(|(host, score)| HostPriority { host, score })
            .collect();
        Ok(json_response(StatusCode::OK, &list))
    }

    async fn answer(&self, verb: &'static str, profile: String, req: Request) -> Response {
        let started = Instant::now();
        let out = match verb {
            "filter" => self.filter(&profile, req).await,
            _ => self.prioritize(&profile, req).await,
        };
        self.metrics
            .extender_duration
            .get_or_create(&VerbLabel {
                verb: verb.to_string(),
            })
            .observe(started.elapsed().as_secs_f64());
        match out {
            Ok(r) => {
                self.count(verb, "ok");
                r
            }
            Err(Refusal(status, result, message)) => {
                self.count(verb, result);
                warn!(verb, profile, %status, %message, "extender call refused");
                json_response(status, &ErrorBody { error: message })
            }
        }
    }
}

async fn filter_route(
    State(e): State<Arc<Extender>>,
    Path(profile): Path<String>,
    req: Request,
) -> Response {
    e.answer("filter", profile, req).await
}

async fn prioritize_route(
    State(e): State<Arc<Extender>>,
    Path(profile): Path<String>,
    req: Request,
) -> Response {
    e.answer("prioritize", profile, req).await
}

async fn bind_route() -> Response {
    json_response(
        StatusCode::NOT_IMPLEMENTED,
        &ErrorBody {
            error: "Loadstar's extender does not bind: configure the extender without \
                    bindVerb (kube-scheduler then binds), or use loadstar.v1.Scheduler/Bind"
                .into(),
        },
    )
}

/// The extender's routes.
pub fn router(extender: Arc<Extender>) -> Router {
    Router::new()
        .route("/extender/v1/{profile}/filter", post(filter_route))
        .route("/extender/v1/{profile}/prioritize", post(prioritize_route))
        .route("/extender/v1/{profile}/bind", post(bind_route))
        // The body is read in the handlers, under their own cap and deadline.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(extender)
}

/// Serves the extender over HTTPS (see [`crate::tls`]) until `shutdown` resolves.
pub async fn serve_tls(
    listener: crate::tls::TlsListener,
    extender: Arc<Extender>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(extender))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Serves the extender on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    extender: Arc<Extender>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(extender))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use loadstar_policy::config::ScorerConfig;
    use loadstar_store::StoreConfig;
    use loadstar_store::cluster::ClusterError;
    use loadstar_testkit::agent::fixed_report;
    use serde_json::{Value, json};
    use tower::ServiceExt;

    /// Reads only the name and a CPU request (the scheduler's real decoder lives in the
    /// Kubernetes layer).
    #[derive(Debug)]
    struct NameDecoder;
    impl PodDecoder for NameDecoder {
        fn decode(&self, json: &str) -> Result<PodInfo, ClusterError> {
            let v: Value =
                serde_json::from_str(json).map_err(|e| ClusterError::Invalid(e.to_string()))?;
            let name = v
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .ok_or_else(|| ClusterError::Invalid("no metadata.name".into()))?;
            Ok(PodInfo {
                name: name.into(),
                namespace: "default".into(),
                uid: "u".into(),
                ..Default::default()
            })
        }
    }

    fn app(limits: ExtenderLimits) -> Router {
        router(extender(limits))
    }

    fn extender(limits: ExtenderLimits) -> Arc<Extender> {
        let store = Arc::new(NodeStore::new(StoreConfig::default()));
        let now = std::time::Instant::now();
        store
            .apply_report(fixed_report("hot", 1, 0.97, 0.3), now)
            .expect("report");
        store
            .apply_report(fixed_report("cool", 1, 0.05, 0.3), now)
            .expect("report");
        let profiles = ScorerConfig::embedded_default()
            .build_profiles()
            .expect("profiles");
        let again = ScorerConfig::embedded_default()
            .build_profiles()
            .expect("profiles");
        Arc::new(Extender::new(
            store,
            profiles,
            again,
            Arc::new(NameDecoder),
            Metrics::new(),
            limits,
        ))
    }

    async fn call(app: Router, path: &str, body: impl Into<Body>) -> (StatusCode, Value) {
        let req = http::Request::post(path)
            .header("content-type", "application/json")
            .body(body.into())
            .expect("request");
        let resp = app.oneshot(req).await.expect("response");
        let status = resp.status();
        let bytes = to_bytes(resp.into_body(), 64 << 20).await.expect("body");
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    fn args_names(names: &[&str]) -> String {
        json!({"Pod": {"metadata": {"name": "p"}}, "Nodes": null, "NodeNames": names}).to_string()
    }

    #[tokio::test]
    async fn filters_by_names_and_by_whole_nodes() {
        let a = app(ExtenderLimits::default());
        let (s, v) = call(
            a.clone(),
            "/extender/v1/loadstar/filter",
            args_names(&["hot", "cool", "new"]),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["NodeNames"], json!(["cool", "new"]));
        assert!(
            v["FailedNodes"]["hot"]
                .as_str()
                .is_some_and(|r| r.contains("cpu")),
            "{v}"
        );
        // nodeCacheCapable: false: whole nodes in, the passing ones out, as sent.
        let nodes = json!({"Pod": {"metadata": {"name": "p"}}, "Nodes": {"items": [
            {"metadata": {"name": "hot", "labels": {"x": "1"}}},
            {"metadata": {"name": "cool", "labels": {"x": "2"}}}]}});
        let (s, v) = call(a, "/extender/v1/default/filter", nodes.to_string()).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(
            v["Nodes"]["items"],
            json!([{"metadata": {"name": "cool", "labels": {"x": "2"}}}])
        );
        assert_eq!(v["NodeNames"], Value::Null);
    }

    #[tokio::test]
    async fn prioritizes_cool_nodes_higher_in_the_extender_range() {
        let (s, v) = call(
            app(ExtenderLimits::default()),
            "/extender/v1/loadstar/prioritize",
            args_names(&["hot", "cool"]),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        let score = |h: &str| {
            v.as_array()
                .and_then(|l| l.iter().find(|e| e["Host"] == h))
                .and_then(|e| e["Score"].as_i64())
                .expect("scored")
        };
        assert!(score("cool") > score("hot"), "{v}");
        assert!((0..=10).contains(&score("cool")));
    }

    #[tokio::test]
    async fn bad_input_gets_a_clear_4xx() {
        let a = app(ExtenderLimits {
            max_body_bytes: 4096,
            ..ExtenderLimits::default()
        });
        let cases: Vec<(&str, String, StatusCode, &str)> = vec![
            (
                "/extender/v1/loadstar/filter",
                "{not json".into(),
                StatusCode::BAD_REQUEST,
                "not ExtenderArgs",
            ),
            (
                "/extender/v1/nope/filter",
                args_names(&["a"]),
                StatusCode::NOT_FOUND,
                "no profile",
            ),
            (
                "/extender/v1/loadstar/filter",
                json!({"Pod": {"metadata": {"name": "p"}}}).to_string(),
                StatusCode::BAD_REQUEST,
                "neither NodeNames nor Nodes",
            ),
            (
                "/extender/v1/loadstar/prioritize",
                json!({"NodeNames": ["a"]}).to_string(),
                StatusCode::BAD_REQUEST,
                "no Pod",
            ),
            (
                "/extender/v1/loadstar/filter",
                json!({"Pod": {"metadata": {"name": "p"}},
                "Nodes": {"items": [{"metadata": {}}]}})
                .to_string(),
                StatusCode::BAD_REQUEST,
                "no metadata.name",
            ),
            (
                "/extender/v1/loadstar/filter",
                " ".repeat(5000),
                StatusCode::PAYLOAD_TOO_LARGE,
                "over 4096 bytes",
            ),
            (
                "/extender/v1/loadstar/bind",
                "{}".into(),
                StatusCode::NOT_IMPLEMENTED,
                "does not bind",
            ),
        ];
        for (path, body, status, text) in cases {
            let (s, v) = call(a.clone(), path, body).await;
            assert_eq!(s, status, "{path}: {v}");
            assert!(
                v["Error"].as_str().is_some_and(|e| e.contains(text)),
                "{path}: {v}"
            );
        }
        // A 60 KB profile name (near the longest URI `http` accepts) is quoted briefly.
        let path = format!("/extender/v1/{}/filter", "p".repeat(60_000));
        let (s, v) = call(a.clone(), &path, args_names(&["a"])).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
        let e = v["Error"].as_str().unwrap_or_default();
        assert!(e.len() < 1024, "{} bytes", e.len());
        assert!(e.contains("no profile \"pppppppppppppppp"), "{e}");
        // Empty lists are fine.
        let (s, v) = call(a, "/extender/v1/loadstar/filter", args_names(&[])).await;
        assert_eq!((s, v["NodeNames"].clone()), (StatusCode::OK, json!([])));
    }

    #[tokio::test]
    async fn a_hundred_thousand_names_are_answered_and_a_stalled_body_times_out() {
        let names: Vec<String> = (0..100_000).map(|i| format!("node-{i:06}")).collect();
        let body = json!({"Pod": {"metadata": {"name": "p"}}, "NodeNames": names}).to_string();
        let a = app(ExtenderLimits::default());
        let (s, v) = call(a.clone(), "/extender/v1/loadstar/filter", body.clone()).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(v["NodeNames"].as_array().map(Vec::len), Some(100_000));
        let (s, v) = call(a, "/extender/v1/loadstar/prioritize", body).await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(v.as_array().map(Vec::len), Some(100_000));
        // A client that sends half a body and stalls gets 408 at the deadline.
        let stalled = futures_stalled();
        let a = app(ExtenderLimits {
            body_timeout: std::time::Duration::from_millis(200),
            ..ExtenderLimits::default()
        });
        let (s, v) = call(a, "/extender/v1/loadstar/filter", stalled).await;
        assert_eq!(s, StatusCode::REQUEST_TIMEOUT, "{v}");
    }

    #[tokio::test]
    async fn bodies_held_at_once_are_bounded_before_they_are_read() {
        let e = extender(ExtenderLimits {
            max_body_bytes: 4 << 20,
            max_buffered_bytes: 4 << 20,
            body_timeout: std::time::Duration::from_secs(2),
            queue_timeout: std::time::Duration::from_millis(200),
            ..ExtenderLimits::default()
        });
        let a = router(e.clone());
        // A declared length over the cap is refused before a byte is read.
        let req = http::Request::post("/extender/v1/loadstar/filter")
            .header("content-length", (5u64 << 20).to_string())
            .body(futures_stalled())
            .expect("request");
        let resp = a.clone().oneshot(req).await.expect("response");
        assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
        // A stalled body of unknown length holds the whole budget while it is read...
        let holder = tokio::spawn(call(
            a.clone(),
            "/extender/v1/loadstar/filter",
            futures_stalled(),
        ));
        for _ in 0..500 {
            if e.budget.available_permits() == 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(
            e.budget.available_permits(),
            0,
            "the stalled call holds the budget"
        );
        // ...so another call waits, then is told the scorer is busy, unread.
        let (s, v) = call(
            a.clone(),
            "/extender/v1/loadstar/filter",
            args_names(&["hot", "cool"]),
        )
        .await;
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{v}");
        assert!(
            v["Error"]
                .as_str()
                .is_some_and(|e| e.contains("held already")),
            "{v}"
        );
        // Once the stalled body times out, its room is free again.
        let (s, _) = holder.await.expect("holder");
        assert_eq!(s, StatusCode::REQUEST_TIMEOUT);
        let (s, v) = call(
            a,
            "/extender/v1/loadstar/filter",
            args_names(&["hot", "cool"]),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }

    /// A body that yields its first bytes, then nothing, forever.
    fn futures_stalled() -> Body {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(1);
        tokio::spawn(async move {
            let _ = tx
                .send(Ok(axum::body::Bytes::from_static(b"{\"Pod\":")))
                .await;
            // Keep the sender alive: the body never ends.
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
            drop(tx);
        });
        Body::from_stream(tokio_stream_from(rx))
    }

    fn tokio_stream_from(
        mut rx: tokio::sync::mpsc::Receiver<Result<axum::body::Bytes, std::io::Error>>,
    ) -> impl futures::Stream<Item = Result<axum::body::Bytes, std::io::Error>> {
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}
