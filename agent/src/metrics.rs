//! The agent's own observability: Prometheus text on `/metrics` (sample duration, collector
//! errors, report stream health, and the node's current load gauges) and `/healthz`, served
//! with axum.
//!
//! Metric names are constants with their unit in the name. Counters are registered without
//! the `_total` suffix, which the OpenMetrics encoder appends.
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use loadstar_common::model::ResourceKind;
use loadstar_proto::pb;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

/// Histogram of the wall time of one sample, seconds.
pub const SAMPLE_DURATION_SECONDS: &str = "loadstar_agent_sample_duration_seconds";
/// Samples taken (exposed as `loadstar_agent_samples_total`).
pub const SAMPLES: &str = "loadstar_agent_samples";
/// Collector failures by collector (exposed with `_total`).
pub const COLLECTOR_ERRORS: &str = "loadstar_agent_collector_errors";
/// Reports handed to a scorer stream, by scorer address (exposed with `_total`).
pub const REPORTS_SENT: &str = "loadstar_agent_reports_sent";
/// Failed connections or streams, by scorer address (exposed with `_total`).
pub const REPORT_ERRORS: &str = "loadstar_agent_report_errors";
/// Streams reopened after one ended (the scorer closed it, it failed, or the token was
/// rotated), by scorer address (exposed with `_total`).
pub const STREAM_RECONNECTS: &str = "loadstar_agent_stream_reconnects";
/// Reports the scorer rejected, by scorer address (exposed with `_total`).
pub const REPORTS_REJECTED: &str = "loadstar_agent_reports_rejected";
/// 1 while a stream to that scorer address is open.
pub const SCORER_CONNECTED: &str = "loadstar_agent_scorer_connected";
/// Number of scorer streams open.
pub const SCORERS_CONNECTED: &str = "loadstar_agent_scorers_connected";
/// Latest utilisation ratio per resource.
pub const NODE_UTILIZATION_RATIO: &str = "loadstar_node_utilization_ratio";
/// MemAvailable, bytes.
pub const NODE_MEMORY_AVAILABLE_BYTES: &str = "loadstar_node_memory_available_bytes";
/// nodefs.available ratio.
pub const NODE_NODEFS_AVAILABLE_RATIO: &str = "loadstar_node_nodefs_available_ratio";
/// nodefs.inodesFree ratio.
pub const NODE_NODEFS_INODES_FREE_RATIO: &str = "loadstar_node_nodefs_inodes_free_ratio";

/// `collector` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CollectorLabels {
    /// Collector name.
    pub collector: String,
}

/// `scorer` label (a socket address).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScorerLabels {
    /// Scorer address, e.g. `10.0.0.7:7443`.
    pub scorer: String,
}

/// `resource` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    /// Resource name (`cpu`, `memory`, …).
    pub resource: &'static str,
}

type GaugeF64 = Gauge<f64, AtomicU64>;

#[derive(Debug)]
struct Inner {
    registry: Registry,
    sample_duration: Histogram,
    samples: Counter,
    collector_errors: Family<CollectorLabels, Counter>,
    reports_sent: Family<ScorerLabels, Counter>,
    report_errors: Family<ScorerLabels, Counter>,
    reports_rejected: Family<ScorerLabels, Counter>,
    stream_reconnects: Family<ScorerLabels, Counter>,
    scorer_connected: Family<ScorerLabels, Gauge>,
    scorers_connected: Gauge,
    node_utilization: Family<ResourceLabels, GaugeF64>,
    memory_available: Gauge,
    nodefs_available: GaugeF64,
    nodefs_inodes_free: GaugeF64,
    started: Instant,
    /// Milliseconds after `started` of the last sample; `u64::MAX` before the first.
    last_sample_ms: AtomicU64,
}

/// The agent's metrics and health state; cheap to clone and share between tasks.
#[derive(Debug, Clone)]
pub struct AgentMetrics {
    inner: Arc<Inner>,
}

impl Default for AgentMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl AgentMetrics {
    /// Registers every metric.
    pub fn new() -> Self {
        let mut r = Registrar(Registry::default());
        // 50 µs … ~0.8 s.
        let sample_duration = Histogram::new(exponential_buckets(50e-6, 2.0, 15));
        let inner = Inner {
            sample_duration: r.add_with(
                SAMPLE_DURATION_SECONDS,
                "Wall time of one sample of every collector",
                sample_duration,
            ),
            samples: r.add(SAMPLES, "Samples taken"),
            collector_errors: r.add(COLLECTOR_ERRORS, "Collector failures"),
            reports_sent: r.add(REPORTS_SENT, "Reports handed to a scorer stream"),
            report_errors: r.add(REPORT_ERRORS, "Failed scorer connections or streams"),
            reports_rejected: r.add(REPORTS_REJECTED, "Reports a scorer rejected"),
            stream_reconnects: r.add(
                STREAM_RECONNECTS,
                "Report streams reopened after one ended, by scorer",
            ),
            scorer_connected: r.add(
                SCORER_CONNECTED,
                "1 while the stream to this scorer address is open",
            ),
            scorers_connected: r.add(SCORERS_CONNECTED, "Scorer streams open"),
            node_utilization: r.add(
                NODE_UTILIZATION_RATIO,
                "Latest utilisation of the node per resource",
            ),
            memory_available: r.add(NODE_MEMORY_AVAILABLE_BYTES, "MemAvailable of the node"),
            nodefs_available: r.add(
                NODE_NODEFS_AVAILABLE_RATIO,
                "Available over total bytes of the root filesystem",
            ),
            nodefs_inodes_free: r.add(
                NODE_NODEFS_INODES_FREE_RATIO,
                "Free over total inodes of the root filesystem",
            ),
            started: Instant::now(),
            last_sample_ms: AtomicU64::new(u64::MAX),
            registry: r.0,
        };
        AgentMetrics {
            inner: Arc::new(inner),
        }
    }

    /// Records one sample: its duration, its collector errors and the node gauges.
    pub fn observe_sample(&self, report: &pb::NodeReport, duration: Duration) {
        let i = &self.inner;
        i.sample_duration.observe(duration.as_secs_f64());
        i.samples.inc();
        for e in &report.collector_errors {
            i.collector_errors
                .get_or_create(&CollectorLabels {
                    collector: e.collector.clone(),
                })
                .inc();
        }
        for u in &report.usage {
            let kind = pb::Resource::try_from(u.resource)
                .ok()
                .and_then(|r| ResourceKind::try_from(r).ok());
            if let Some(kind) = kind {
                i.node_utilization
                    .get_or_create(&ResourceLabels {
                        resource: kind.name(),
                    })
                    .set(u.latest_ratio);
            }
        }
        if let Some(ev) = &report.eviction {
            i.memory_available
                .set(i64::try_from(ev.memory_available_bytes).unwrap_or(i64::MAX));
            if let Some(r) = ev.nodefs_available_ratio {
                i.nodefs_available.set(r);
            }
            if let Some(r) = ev.nodefs_inodes_free_ratio {
                i.nodefs_inodes_free.set(r);
            }
        }
        let ms = u64::try_from(i.started.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        i.last_sample_ms.store(ms, Ordering::Relaxed);
    }

    /// Counts a report handed to the stream of `scorer`.
    pub fn report_sent(&self, scorer: &str) {
        self.inner
            .reports_sent
            .get_or_create(&scorer_labels(scorer))
            .inc();
    }

    /// Counts a failed connection or stream to `scorer`.
    pub fn report_error(&self, scorer: &str) {
        self.inner
            .report_errors
            .get_or_create(&scorer_labels(scorer))
            .inc();
    }

    /// Counts a report `scorer` rejected.
    pub fn report_rejected(&self, scorer: &str) {
        self.inner
            .reports_rejected
            .get_or_create(&scorer_labels(scorer))
            .inc();
    }

    /// Counts a stream to `scorer` being reopened.
    pub fn stream_reconnect(&self, scorer: &str) {
        self.inner
            .stream_reconnects
            .get_or_create(&scorer_labels(scorer))
            .inc();
    }

    /// Marks the stream to `scorer` open or closed.
    pub fn set_connected(&self, scorer: &str, connected: bool) {
        let prev = self
            .inner
            .scorer_connected
            .get_or_create(&scorer_labels(scorer))
            .set(i64::from(connected));
        match (prev != 0, connected) {
            (false, true) => {
                self.inner.scorers_connected.inc();
            }
            (true, false) => {
                self.inner.scorers_connected.dec();
            }
            _ => {}
        }
    }

    /// Forgets a scorer address that no longer resolves.
    pub fn forget_scorer(&self, scorer: &str) {
        self.set_connected(scorer, false);
        self.inner.scorer_connected.remove(&scorer_labels(scorer));
    }

    /// Number of scorer streams open.
    pub fn scorers_connected(&self) -> i64 {
        self.inner.scorers_connected.get()
    }

    /// Healthy when a sample was taken within `max_age` (or the agent started less than
    /// `max_age` ago and has not sampled yet).
    pub fn healthy(&self, max_age: Duration) -> bool {
        let i = &self.inner;
        let now = i.started.elapsed();
        match i.last_sample_ms.load(Ordering::Relaxed) {
            u64::MAX => now <= max_age,
            ms => now.saturating_sub(Duration::from_millis(ms)) <= max_age,
        }
    }

    /// The Prometheus/OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(4096);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry);
        out
    }
}

fn scorer_labels(scorer: &str) -> ScorerLabels {
    ScorerLabels {
        scorer: scorer.to_string(),
    }
}

/// Registers each metric where it is declared: name, help and type (from the field it
/// initialises) in one place.
struct Registrar(Registry);

impl Registrar {
    /// A new metric of type `M`, registered as `name`.
    fn add<M: Metric + Clone + Default>(&mut self, name: &str, help: &str) -> M {
        self.add_with(name, help, M::default())
    }

    /// `metric`, registered as `name`.
    fn add_with<M: Metric + Clone>(&mut self, name: &str, help: &str, metric: M) -> M {
        self.0.register(name, help, metric.clone());
        metric
    }
}

#[derive(Clone)]
struct HttpState {
    metrics: AgentMetrics,
    max_age: Duration,
}

/// The `/metrics` and `/healthz` router. `/healthz` answers 503 when no sample was taken
/// within `max_sample_age`.
pub fn router(metrics: AgentMetrics, max_sample_age: Duration) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz_handler))
        .with_state(HttpState {
            metrics,
            max_age: max_sample_age,
        })
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

async fn healthz_handler(State(s): State<HttpState>) -> impl IntoResponse {
    if s.metrics.healthy(s.max_age) {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "no recent sample\n")
    }
}

/// Serves the router on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: AgentMetrics,
    max_sample_age: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(metrics, max_sample_age))
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_names_units_and_labels() {
        let m = AgentMetrics::new();
        let report = pb::NodeReport {
            usage: vec![pb::ResourceUsage {
                resource: pb::Resource::Cpu as i32,
                latest_ratio: 0.25,
                windows: vec![],
            }],
            collector_errors: vec![pb::CollectorError {
                collector: "disk".into(),
                message: "x".into(),
            }],
            eviction: Some(pb::EvictionSignals {
                memory_available_bytes: 1234,
                nodefs_available_ratio: Some(0.5),
                ..Default::default()
            }),
            ..Default::default()
        };
        m.observe_sample(&report, Duration::from_micros(300));
        m.set_connected("127.0.0.1:1", true);
        m.set_connected("127.0.0.1:1", true);
        m.report_sent("127.0.0.1:1");
        let text = m.encode();
        for needle in [
            "loadstar_agent_samples_total 1",
            "loadstar_agent_collector_errors_total{collector=\"disk\"} 1",
            "loadstar_node_utilization_ratio{resource=\"cpu\"} 0.25",
            "loadstar_node_memory_available_bytes 1234",
            "loadstar_agent_scorers_connected 1",
            "loadstar_agent_reports_sent_total{scorer=\"127.0.0.1:1\"} 1",
            "loadstar_agent_sample_duration_seconds_count 1",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
        m.forget_scorer("127.0.0.1:1");
        assert_eq!(m.scorers_connected(), 0);
    }

    #[test]
    fn health_follows_samples() {
        let m = AgentMetrics::new();
        assert!(m.healthy(Duration::from_secs(5)), "grace period at start");
        std::thread::sleep(Duration::from_millis(20));
        assert!(!m.healthy(Duration::from_millis(10)), "never sampled");
        m.observe_sample(&pb::NodeReport::default(), Duration::ZERO);
        assert!(m.healthy(Duration::from_millis(10)));
    }
}
