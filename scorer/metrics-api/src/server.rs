//! The HTTPS side of `metrics.k8s.io`: the API server's aggregator is the only client. It
//! must present its front-proxy client certificate (signed by the CA the API server publishes
//! in `kube-system/extension-apiserver-authentication`, with a CN among its allowed names),
//! exactly as metrics-server checks it; the API server has already authorised the end user
//! (RBAC on `metrics.k8s.io`) before proxying. Node usage comes from the node store (the
//! agents' latest sample), pod usage from the usage book (mean over `window_s`), pod names and
//! labels from a metadata-only watch of pods.
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, Path, RawQuery, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use loadstar_auth::identity::Identity;
use loadstar_auth::tls::{ServerTls, TlsFiles};
use loadstar_autoscale::usage::PodUsageBook;
use loadstar_autoscaler::feed::unix_now_s;
use loadstar_autoscaler::status::rfc3339;
use loadstar_autoscaler::{SharedBook, lock};
use loadstar_common::model::ResourceKind;
use loadstar_extender::tls::TlsListener;
use loadstar_store::NodeStore;
use loadstar_store::metrics::{Metrics, ResourceResultLabel};
use serde_json::Value;
use thiserror::Error;
use tracing::{debug, info, warn};

use crate::selector::Selector;
use crate::wire::{self, NodeRow, PodRow};

/// Why the metrics API could not start.
#[derive(Debug, Error)]
pub enum MetricsApiError {
    /// The API server's authentication ConfigMap could not be read.
    #[error(
        "reading kube-system/extension-apiserver-authentication: {0} (the scorer needs the \
         extension-apiserver-authentication-reader Role in kube-system)"
    )]
    ConfigMap(String),
    /// The API server has no front-proxy CA: aggregation is not configured.
    #[error(
        "kube-system/extension-apiserver-authentication has no requestheader-client-ca-file: \
         the API server runs without --requestheader-client-ca-file and \
         --proxy-client-cert-file, so it cannot proxy aggregated APIs"
    )]
    NoFrontProxyCa,
    /// The CA could not be written where the TLS layer reads it.
    #[error("writing the front-proxy CA to {path}: {reason}")]
    WriteCa {
        /// The file.
        path: String,
        /// The error.
        reason: String,
    },
    /// TLS material.
    #[error(transparent)]
    Tls(#[from] loadstar_auth::tls::TlsError),
    /// The port.
    #[error("listening on {addr}: {reason}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The error.
        reason: String,
    },
}

/// Settings of the metrics API.
#[derive(Debug, Clone)]
pub struct MetricsApiConfig {
    /// HTTPS address.
    pub listen: SocketAddr,
    /// Serving certificate (PEM).
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
    /// A writable directory for the front-proxy CA read from the cluster.
    pub ca_dir: PathBuf,
    /// Pods' usage is averaged over this many seconds (default 15).
    pub window_s: f64,
}

/// The front-proxy trust the API server publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontProxy {
    /// PEM CA bundle.
    pub ca_pem: String,
    /// CNs allowed (empty: any certificate the CA signed).
    pub allowed_names: Vec<String>,
}

/// Reads the front-proxy CA and allowed names from the ConfigMap's data.
pub fn front_proxy(data: &BTreeMap<String, String>) -> Result<FrontProxy, MetricsApiError> {
    let ca_pem = data
        .get("requestheader-client-ca-file")
        .filter(|s| !s.trim().is_empty())
        .ok_or(MetricsApiError::NoFrontProxyCa)?
        .clone();
    let allowed_names = match data.get("requestheader-allowed-names") {
        None => Vec::new(),
        Some(s) if s.trim().is_empty() => Vec::new(),
        Some(s) => serde_json::from_str::<Vec<String>>(s).map_err(|e| {
            MetricsApiError::ConfigMap(format!(
                "requestheader-allowed-names is not a JSON list of names: {e}"
            ))
        })?,
    };
    Ok(FrontProxy {
        ca_pem,
        allowed_names,
    })
}

async fn read_front_proxy(client: &Client) -> Result<FrontProxy, MetricsApiError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-system");
    let cm = api
        .get("extension-apiserver-authentication")
        .await
        .map_err(|e| MetricsApiError::ConfigMap(e.to_string()))?;
    front_proxy(&cm.data.unwrap_or_default())
}

/// The caller, from its TLS client certificate.
#[derive(Debug, Clone)]
struct Peer {
    addr: SocketAddr,
    common_name: Option<String>,
}

impl Connected<axum::serve::IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(s: axum::serve::IncomingStream<'_, TlsListener>) -> Self {
        let (_, conn) = s.io().get_ref();
        let common_name = conn
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(|der| Identity::from_certificate(der).ok())
            .map(|i| i.username);
        Peer {
            addr: *s.remote_addr(),
            common_name,
        }
    }
}

#[derive(Clone)]
struct AppState {
    store: Arc<NodeStore>,
    book: SharedBook,
    pods: Store<PartialObjectMeta<Pod>>,
    allowed: Arc<RwLock<Vec<String>>>,
    window_s: f64,
    metrics: Arc<Metrics>,
}

/// A JSON body (axum's `json` feature stays off: the workspace shares one axum build).
fn json(code: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (code, [(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

fn fail(code: StatusCode, reason: &str, message: &str) -> Response {
    json(code, &wire::status(code.as_u16(), reason, message))
}

/// A refused request, answered as a `Status`.
#[derive(Debug)]
struct Refusal {
    code: StatusCode,
    reason: &'static str,
    message: String,
}

impl Refusal {
    fn new(code: StatusCode, reason: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            reason,
            message: message.into(),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        fail(self.code, self.reason, &self.message)
    }
}

/// The query parameters a list reads.
#[derive(Debug, Default)]
struct ListQuery {
    label_selector: Option<String>,
    field_selector: Option<String>,
}

impl ListQuery {
    fn parse(raw: Option<&str>) -> ListQuery {
        let mut q = ListQuery::default();
        for (k, v) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            match k.as_ref() {
                "labelSelector" => q.label_selector = Some(v.into_owned()),
                "fieldSelector" => q.field_selector = Some(v.into_owned()),
                _ => {}
            }
        }
        q
    }
}

impl AppState {
    /// Counts a request to `resource` answered with `response`'s status.
    fn count(&self, resource: &str, response: Response) -> Response {
        self.metrics
            .metrics_api_requests
            .get_or_create(&ResourceResultLabel {
                resource: resource.into(),
                result: response.status().as_u16().to_string(),
            })
            .inc();
        response
    }

    /// Refuses callers that are not the aggregator.
    fn check(&self, peer: &Peer) -> Result<(), Refusal> {
        let allowed = self.allowed.read().unwrap_or_else(|p| p.into_inner());
        match &peer.common_name {
            None => Err(Refusal::new(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "a front-proxy client certificate is required",
            )),
            Some(cn) if !allowed.is_empty() && !allowed.contains(cn) => {
                warn!(peer = %peer.addr, cn = %cn, "metrics API: certificate CN not allowed");
                Err(Refusal::new(
                    StatusCode::FORBIDDEN,
                    "Forbidden",
                    "the client certificate's CN is not among requestheader-allowed-names",
                ))
            }
            Some(_) => Ok(()),
        }
    }

    fn node_row(&self, name: &str, now: Instant, now_s: f64) -> Option<NodeRow> {
        let agent = self.store.agent(name)?;
        let at = agent.received_at?;
        let age = now.saturating_duration_since(at).as_secs_f64();
        // Omitted when the agent went quiet, as metrics-server omits nodes it cannot scrape.
        let every = agent
            .interval_seconds
            .max(agent.report_interval_seconds)
            .max(1.0);
        if age > 3.0 * every {
            return None;
        }
        let cpu = agent.load.get(ResourceKind::Cpu)?.latest;
        let mem = agent.load.get(ResourceKind::Memory)?.latest;
        let labels = self
            .store
            .kube_node(name)
            .map(|k| k.labels.clone())
            .unwrap_or_default();
        Some(NodeRow {
            name: name.to_string(),
            labels,
            cpu_cores: cpu * f64::from(agent.capacity.logical_cpus),
            memory_bytes: mem * agent.capacity.memory_bytes as f64,
            timestamp: rfc3339(now_s - age),
            window_s: agent.interval_seconds.max(1.0),
        })
    }

    fn pod_row(
        &self,
        meta: &PartialObjectMeta<Pod>,
        book: &PodUsageBook,
        now_s: f64,
    ) -> Option<PodRow> {
        let uid = meta.uid()?;
        let w = book.window(&uid, now_s, self.window_s)?;
        Some(PodRow {
            namespace: meta.namespace().unwrap_or_default(),
            name: meta.name_any(),
            labels: meta.labels().clone(),
            container: "pod".into(),
            cpu_cores: w.cpu_cores,
            memory_bytes: w.memory_bytes,
            timestamp: rfc3339(w.last_s),
            window_s: self.window_s,
        })
    }

    fn pods(&self, namespace: Option<&str>, selector: &Selector) -> Vec<Value> {
        let now_s = unix_now_s();
        let book = lock(&self.book);
        let mut rows: Vec<PodRow> = self
            .pods
            .state()
            .iter()
            .filter(|m| namespace.is_none_or(|ns| m.namespace().as_deref() == Some(ns)))
            .filter(|m| selector.matches(m.labels()))
            .filter_map(|m| self.pod_row(m, &book, now_s))
            .collect();
        rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        rows.iter().map(wire::pod_metrics).collect()
    }
}

fn selector(q: &ListQuery) -> Result<Selector, Refusal> {
    if q.field_selector.as_deref().is_some_and(|f| !f.is_empty()) {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "fieldSelector is not supported by Loadstar's metrics API; use labelSelector",
        ));
    }
    Selector::parse(q.label_selector.as_deref().unwrap_or(""))
        .map_err(|e| Refusal::new(StatusCode::BAD_REQUEST, "BadRequest", e.to_string()))
}

async fn list_nodes(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    RawQuery(raw): RawQuery,
) -> Response {
    if let Err(r) = s.check(&peer) {
        return r.into_response();
    }
    let sel = match selector(&ListQuery::parse(raw.as_deref())) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    let (now, now_s) = (Instant::now(), unix_now_s());
    let items = s
        .store
        .node_names()
        .iter()
        .filter_map(|n| s.node_row(n, now, now_s))
        .filter(|r| sel.matches(&r.labels))
        .map(|r| wire::node_metrics(&r))
        .collect();
    json(StatusCode::OK, &wire::list("NodeMetricsList", items))
}

async fn get_node(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(name): Path<String>,
) -> Response {
    if let Err(r) = s.check(&peer) {
        return r.into_response();
    }
    match s.node_row(&name, Instant::now(), unix_now_s()) {
        Some(r) => json(StatusCode::OK, &wire::node_metrics(&r)),
        None => fail(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!(
                "nodemetrics.metrics.k8s.io {:?} not found",
                name.chars().take(253).collect::<String>()
            ),
        ),
    }
}

/// A pod list in `ns` (all namespaces when `None`), filtered by the query's label selector.
fn pod_list(s: &AppState, peer: &Peer, ns: Option<&str>, raw: Option<&str>) -> Response {
    if let Err(r) = s.check(peer) {
        return r.into_response();
    }
    match selector(&ListQuery::parse(raw)) {
        Ok(sel) => json(
            StatusCode::OK,
            &wire::list("PodMetricsList", s.pods(ns, &sel)),
        ),
        Err(r) => r.into_response(),
    }
}

async fn list_pods(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    RawQuery(raw): RawQuery,
) -> Response {
    pod_list(&s, &peer, None, raw.as_deref())
}

async fn list_namespace_pods(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(ns): Path<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    pod_list(&s, &peer, Some(&ns), raw.as_deref())
}

async fn get_pod(
    State(s): State<AppState>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    if let Err(r) = s.check(&peer) {
        return r.into_response();
    }
    let found = s
        .pods
        .get(&reflector::ObjectRef::new(&name).within(&ns))
        .and_then(|m| {
            let book = lock(&s.book);
            s.pod_row(&m, &book, unix_now_s())
        });
    match found {
        Some(r) => json(StatusCode::OK, &wire::pod_metrics(&r)),
        None => fail(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!(
                "podmetrics.metrics.k8s.io \"{}/{}\" not found",
                ns.chars().take(63).collect::<String>(),
                name.chars().take(253).collect::<String>()
            ),
        ),
    }
}

async fn discovery(State(s): State<AppState>, ConnectInfo(peer): ConnectInfo<Peer>) -> Response {
    match s.check(&peer) {
        Ok(()) => json(StatusCode::OK, &wire::resource_list()),
        Err(r) => r.into_response(),
    }
}

async fn group(State(s): State<AppState>, ConnectInfo(peer): ConnectInfo<Peer>) -> Response {
    match s.check(&peer) {
        Ok(()) => json(StatusCode::OK, &wire::api_group()),
        Err(r) => r.into_response(),
    }
}

async fn openapi() -> Response {
    // The aggregator merges every server's OpenAPI document; this API adds no schema of its
    // own to it (as the kubelet's summary API, clients read it by kind).
    json(
        StatusCode::OK,
        &serde_json::json!({"swagger": "2.0", "info": {"title": "metrics.k8s.io (Loadstar)",
            "version": "v1beta1"}, "paths": {}}),
    )
}

/// What a path asks for, for the request counter.
fn resource_of(path: &str) -> &'static str {
    let Some(rest) = path.strip_prefix("/apis/metrics.k8s.io") else {
        return "other";
    };
    let segments: Vec<&str> = rest
        .trim_start_matches("/v1beta1")
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segments.as_slice() {
        [] => "discovery",
        ["nodes", ..] => "nodes",
        ["pods"] | ["namespaces", _, "pods", ..] => "pods",
        _ => "other",
    }
}

async fn counted(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let resource = resource_of(req.uri().path());
    let response = next.run(req).await;
    s.count(resource, response)
}

fn router(state: AppState) -> Router {
    const GV: &str = "/apis/metrics.k8s.io/v1beta1";
    Router::new()
        .route("/apis/metrics.k8s.io", get(group))
        .route(GV, get(discovery))
        .route(&format!("{GV}/nodes"), get(list_nodes))
        .route(&format!("{GV}/nodes/{{name}}"), get(get_node))
        .route(&format!("{GV}/pods"), get(list_pods))
        .route(
            &format!("{GV}/namespaces/{{ns}}/pods"),
            get(list_namespace_pods),
        )
        .route(
            &format!("{GV}/namespaces/{{ns}}/pods/{{name}}"),
            get(get_pod),
        )
        .route("/openapi/v2", get(openapi))
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .layer(middleware::from_fn_with_state(state.clone(), counted))
        .with_state(state)
}

/// How often the front-proxy trust is re-read from the cluster.
const REFRESH_EVERY: Duration = Duration::from_secs(60);

/// Starts the metrics API: reads the front-proxy trust, watches pods' metadata, serves until
/// `shutdown` resolves. Errors are returned before anything listens.
pub async fn start(
    config: MetricsApiConfig,
    client: Client,
    store: Arc<NodeStore>,
    book: SharedBook,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<tokio::task::JoinHandle<()>, MetricsApiError> {
    let fp = read_front_proxy(&client).await?;
    let ca_path = config.ca_dir.join("requestheader-client-ca.crt");
    let write_ca = |pem: &str| {
        std::fs::create_dir_all(&config.ca_dir)
            .and_then(|()| std::fs::write(&ca_path, pem))
            .map_err(|e| MetricsApiError::WriteCa {
                path: ca_path.display().to_string(),
                reason: e.to_string(),
            })
    };
    write_ca(&fp.ca_pem)?;
    let tls = Arc::new(ServerTls::load(
        TlsFiles {
            cert: config.cert.clone(),
            key: config.key.clone(),
            client_ca: Some(ca_path.clone()),
            require_client_cert: true,
        },
        &[b"http/1.1"],
        metrics.clone(),
    )?);
    // Everything that can fail comes before any task starts: a retried start leaks nothing.
    let reload_tls = tls.clone();
    let tcp = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| MetricsApiError::Listen {
            addr: config.listen,
            reason: e.to_string(),
        })?;
    let listener = TlsListener::new(tcp, tls).map_err(|e| MetricsApiError::Listen {
        addr: config.listen,
        reason: e.to_string(),
    })?;
    let reload = reload_tls.watch(Duration::from_secs(30));
    let allowed = Arc::new(RwLock::new(fp.allowed_names.clone()));
    let refresh = {
        let (client, allowed, ca_path) = (client.clone(), allowed.clone(), ca_path.clone());
        tokio::spawn(async move {
            let mut last = fp;
            loop {
                tokio::time::sleep(REFRESH_EVERY).await;
                match read_front_proxy(&client).await {
                    Ok(fp) if fp != last => {
                        info!("front-proxy trust changed; reloading");
                        if let Err(e) = std::fs::write(&ca_path, &fp.ca_pem) {
                            warn!(error = %e, "writing the new front-proxy CA failed");
                            continue;
                        }
                        *allowed.write().unwrap_or_else(|p| p.into_inner()) =
                            fp.allowed_names.clone();
                        last = fp;
                    }
                    Ok(_) => {}
                    Err(e) => debug!(error = %e, "re-reading the front-proxy trust failed"),
                }
            }
        })
    };
    let (reader, writer) = reflector::store();
    let pods = reflector::reflector(
        writer,
        watcher(
            Api::<PartialObjectMeta<Pod>>::all(client),
            watcher::Config::default().any_semantic(),
        )
        .default_backoff()
        // Only names, namespaces, UIDs and labels are served: the rest of each pod's metadata
        // (managed fields, annotations) would only cost memory.
        .modify(|m| {
            m.metadata.managed_fields = None;
            m.metadata.annotations = None;
            m.metadata.owner_references = None;
        }),
    );
    let watching = tokio::spawn(async move {
        futures::pin_mut!(pods);
        while let Some(ev) = pods.next().await {
            if let Err(e) = ev {
                debug!(error = %e, "metrics API pod watch error; retrying");
            }
        }
    });
    let state = AppState {
        store,
        book,
        pods: reader,
        allowed,
        window_s: config.window_s,
        metrics,
    };
    let app = router(state).into_make_service_with_connect_info::<Peer>();
    info!(listen = %config.listen, window_s = config.window_s, "metrics.k8s.io API serving");
    Ok(tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            warn!(error = %e, "metrics API server stopped");
        }
        for t in [reload, refresh, watching] {
            t.abort();
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(allowed: &[&str]) -> AppState {
        AppState {
            store: Arc::new(NodeStore::new(loadstar_store::StoreConfig::default())),
            book: Arc::new(std::sync::Mutex::new(PodUsageBook::new(
                loadstar_autoscale::usage::BookLimits::default(),
            ))),
            pods: reflector::store().0,
            allowed: Arc::new(RwLock::new(allowed.iter().map(|s| s.to_string()).collect())),
            window_s: 15.0,
            metrics: Metrics::new(),
        }
    }

    fn peer(cn: Option<&str>) -> Peer {
        Peer {
            addr: SocketAddr::from(([127, 0, 0, 1], 1)),
            common_name: cn.map(str::to_string),
        }
    }

    #[test]
    fn only_the_front_proxy_may_call() {
        let s = state(&["front-proxy-client"]);
        let code = |p: Peer| s.check(&p).err().map(|r| r.code);
        assert_eq!(code(peer(None)), Some(StatusCode::UNAUTHORIZED));
        assert_eq!(code(peer(Some("mallory"))), Some(StatusCode::FORBIDDEN));
        assert_eq!(code(peer(Some("front-proxy-client"))), None);
        // No allowed names: any certificate the front-proxy CA signed (as upstream).
        let open = state(&[]);
        assert!(open.check(&peer(Some("anyone"))).is_ok());
        assert!(open.check(&peer(None)).is_err());
    }

    #[test]
    fn requests_are_counted_by_resource() {
        const GV: &str = "/apis/metrics.k8s.io/v1beta1";
        assert_eq!(resource_of(&format!("{GV}/nodes")), "nodes");
        assert_eq!(resource_of(&format!("{GV}/nodes/n1")), "nodes");
        assert_eq!(resource_of(&format!("{GV}/namespaces/a/pods/b")), "pods");
        assert_eq!(
            resource_of(&format!("{GV}/namespaces/nodes-x/pods")),
            "pods"
        );
        assert_eq!(resource_of(&format!("{GV}/pods")), "pods");
        assert_eq!(resource_of("/apis/metrics.k8s.io"), "discovery");
        assert_eq!(resource_of(GV), "discovery");
        assert_eq!(resource_of("/openapi/v2"), "other");
    }

    #[test]
    fn front_proxy_trust_from_the_configmap() {
        let mut data = BTreeMap::new();
        assert!(matches!(
            front_proxy(&data),
            Err(MetricsApiError::NoFrontProxyCa)
        ));
        data.insert("requestheader-client-ca-file".into(), "PEM".into());
        data.insert(
            "requestheader-allowed-names".into(),
            r#"["front-proxy-client"]"#.into(),
        );
        let fp = front_proxy(&data).expect("trust");
        assert_eq!(fp.allowed_names, vec!["front-proxy-client".to_string()]);
        data.insert("requestheader-allowed-names".into(), "garbage".into());
        assert!(matches!(
            front_proxy(&data),
            Err(MetricsApiError::ConfigMap(_))
        ));
        data.remove("requestheader-allowed-names");
        assert!(front_proxy(&data).expect("trust").allowed_names.is_empty());
    }
}
