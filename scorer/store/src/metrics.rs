//! The scorer's Prometheus metrics (names are constants with unit suffixes) and its readiness
//! flag, recorded by the ingest, gRPC and Kubernetes layers; the binary serves them over HTTP.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Reports accepted into the store.
pub const REPORTS_ACCEPTED: &str = "loadstar_scorer_reports_accepted";
/// Reports rejected, by reason.
pub const REPORTS_REJECTED: &str = "loadstar_scorer_reports_rejected";
/// Open agent streams.
pub const INGEST_STREAMS: &str = "loadstar_scorer_ingest_streams";
/// Nodes in the store.
pub const NODES: &str = "loadstar_scorer_nodes";
/// Delay from an agent's sample time to the report's arrival, seconds.
pub const REPORT_LAG: &str = "loadstar_scorer_report_lag_seconds";
/// Time to answer one Score call, seconds.
pub const SCORE_DURATION: &str = "loadstar_scorer_score_duration_seconds";
/// Pods bound, by result.
pub const BINDS: &str = "loadstar_scorer_binds";
/// Time from a pod entering the queue to its binding, seconds.
pub const SCHEDULING_LATENCY: &str = "loadstar_scorer_scheduling_latency_seconds";
/// Preemptions attempted for pods no node fits, by result (`preempted`, `no_candidates`,
/// `ineligible`).
pub const PREEMPTIONS: &str = "loadstar_scorer_preemption_attempts";
/// Pods deleted by preemption.
pub const PREEMPTION_VICTIMS: &str = "loadstar_scorer_preemption_victims";
/// Extender calls, by verb (`filter`, `prioritize`) and result (`ok`, `bad_request`,
/// `unknown_profile`, `too_large`, `timeout`, `busy`).
pub const EXTENDER_REQUESTS: &str = "loadstar_scorer_extender_requests";
/// Time to answer one extender call, seconds, by verb.
pub const EXTENDER_DURATION: &str = "loadstar_scorer_extender_duration_seconds";

/// Open `WatchNodes` streams.
pub const WATCHERS: &str = "loadstar_scorer_watchers";
/// Bytes of node events queued for `WatchNodes` streams (shared events counted per queue).
pub const WATCH_QUEUED: &str = "loadstar_scorer_watch_queued_bytes";
/// `WatchNodes` streams ended or refused by the server, by reason (`lagging`, `limit`,
/// `caller_limit`).
pub const WATCHERS_DROPPED: &str = "loadstar_scorer_watchers_dropped";
/// Agent reports held back by the per-stream rate limit.
pub const INGEST_THROTTLED: &str = "loadstar_scorer_ingest_throttled";
/// Agent streams ended by the server, by reason (`owned`, `too_large`, `broken`).
pub const INGEST_REFUSED: &str = "loadstar_scorer_ingest_streams_refused";
/// Open gRPC connections.
pub const CONNECTIONS: &str = "loadstar_scorer_connections";
/// Connections closed by the server before use, by reason (`no_preface`, `limit`).
pub const CONNECTIONS_CLOSED: &str = "loadstar_scorer_connections_closed";

/// Callers refused by authentication or authorisation, by service (`ingest`, `query`,
/// `bind`) and reason (`loadstar_auth::Reason`).
pub const AUTH_FAILURES: &str = "loadstar_scorer_auth_failures";
/// Token reviews, by result (`authenticated`, `rejected`, `error`, `busy`, `cache_hit`).
pub const TOKEN_REVIEWS: &str = "loadstar_scorer_token_reviews";
/// Token review results cached.
pub const TOKEN_CACHE_ENTRIES: &str = "loadstar_scorer_token_cache_entries";
/// Access reviews (SubjectAccessReview), by result (`allowed`, `denied`, `error`).
pub const ACCESS_REVIEWS: &str = "loadstar_scorer_access_reviews";
/// TLS file reloads, by result (`reloaded`, `error`).
pub const TLS_RELOADS: &str = "loadstar_scorer_tls_reloads";
/// The serving certificate's notAfter, Unix seconds.
pub const TLS_NOT_AFTER: &str = "loadstar_scorer_tls_certificate_expiry_timestamp_seconds";
/// Kubernetes watch failures (each retried with backoff), by watch (`pods`, `nodes`, …).
pub const WATCH_FAILURES: &str = "loadstar_scorer_watch_failures";
/// Full lists of a Kubernetes watch (the first at start, then after a failure the watch
/// cannot resume from, e.g. `410 Gone` after etcd compaction), by watch.
pub const WATCH_RELISTS: &str = "loadstar_scorer_watch_relists";
/// How long a full list took, from its start to the last object applied, by watch.
pub const WATCH_RELIST_DURATION: &str = "loadstar_scorer_watch_relist_duration_seconds";

/// Scheduling attempts, by profile and result (`scheduled`, `unschedulable`, `error`).
pub const SCHEDULE_ATTEMPTS: &str = "loadstar_scorer_schedule_attempts";
/// Time one scheduling attempt spent in each extension point (`PreFilter`, `Filter`,
/// `Score`), seconds, by profile.
pub const EXTENSION_POINT_DURATION: &str = "loadstar_scorer_extension_point_duration_seconds";
/// Pods waiting in the scheduling queue, by queue (`active`, `backoff`, `in_flight`, `gated`).
pub const PENDING_PODS: &str = "loadstar_scorer_pending_pods";
/// Time from assuming a pod to the API server's answer to its binding, seconds.
pub const BIND_DURATION: &str = "loadstar_scorer_bind_duration_seconds";
/// 1 when this replica holds the scheduler's leader Lease, else 0.
pub const LEADER: &str = "loadstar_scorer_leader";
/// Nodes whose load is stale (no report within the store's staleness limit).
pub const STALE_NODES: &str = "loadstar_scorer_stale_nodes";
/// Decisions kept for `explain` and the web view.
pub const DECISIONS: &str = "loadstar_scorer_decisions";
/// The report interval asked of agents in acks (0: no preference); raised under load.
pub const DESIRED_INTERVAL: &str = "loadstar_scorer_desired_interval_seconds";
/// StepScaler polls, by outcome (`scaled`, `held`, `dry_run`, `invalid`, `unable`, `failed`,
/// `conflict`, `stopped`).
pub const STEPSCALER_POLLS: &str = "loadstar_scorer_stepscaler_polls";
/// Pods whose recent usage the scorer keeps for the StepScaler and `metrics.k8s.io`.
pub const POD_USAGE_PODS: &str = "loadstar_scorer_pod_usage_pods";
/// New pods whose usage was not kept because the book was full.
pub const POD_USAGE_REFUSED: &str = "loadstar_scorer_pod_usage_refused";
/// `metrics.k8s.io` requests, by resource (`nodes`, `pods`, `discovery`, `other`) and HTTP
/// status.
pub const METRICS_API_REQUESTS: &str = "loadstar_scorer_metrics_api_requests";

/// Label set of scheduling attempts.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProfileResultLabel {
    /// The profile (schedulerName).
    pub profile: String,
    /// `scheduled`, `unschedulable` or `error`.
    pub result: String,
}

/// Label set of extension-point durations.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExtensionPointLabel {
    /// `PreFilter`, `Filter` or `Score`.
    pub extension_point: String,
    /// The profile.
    pub profile: String,
}

/// Label set of queue depths.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    /// `active`, `backoff`, `in_flight` or `gated` (held by `spec.schedulingGates`).
    pub queue: String,
}

/// Label set of authentication failures.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServiceReasonLabel {
    /// `ingest`, `query` or `bind`.
    pub service: String,
    /// Why.
    pub reason: String,
}

/// Label set with a reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// The reason.
    pub reason: String,
}

/// Label set of requests by resource and result.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceResultLabel {
    /// What was asked for, e.g. `pods`.
    pub resource: String,
    /// The outcome, e.g. an HTTP status.
    pub result: String,
}

/// Label set with a result.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// The result, e.g. `bound`, `conflict`, `error`.
    pub result: String,
}

/// Buckets of relist durations: 1 ms to ~65 s.
fn relist_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// Label set of Kubernetes watches.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabel {
    /// The watched kind, e.g. `pods`, `nodes`, `persistentvolumeclaims`.
    pub watch: String,
}

/// Label set of extender calls.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabel {
    /// `filter` or `prioritize`.
    pub verb: String,
}

/// Label set of extender call results.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbResultLabel {
    /// `filter` or `prioritize`.
    pub verb: String,
    /// The outcome.
    pub result: String,
}

/// All of the scorer's metrics.
#[derive(Debug)]
pub struct Metrics {
    /// See [`REPORTS_ACCEPTED`].
    pub reports_accepted: Counter,
    /// See [`REPORTS_REJECTED`].
    pub reports_rejected: Family<ReasonLabel, Counter>,
    /// See [`INGEST_STREAMS`].
    pub ingest_streams: Gauge,
    /// See [`NODES`].
    pub nodes: Gauge,
    /// See [`REPORT_LAG`].
    pub report_lag: Histogram,
    /// See [`SCORE_DURATION`].
    pub score_duration: Histogram,
    /// See [`BINDS`].
    pub binds: Family<ResultLabel, Counter>,
    /// See [`SCHEDULING_LATENCY`].
    pub scheduling_latency: Histogram,
    /// See [`EXTENDER_REQUESTS`].
    pub extender_requests: Family<VerbResultLabel, Counter>,
    /// See [`EXTENDER_DURATION`].
    pub extender_duration: Family<VerbLabel, Histogram>,
    /// See [`PREEMPTIONS`].
    pub preemptions: Family<ResultLabel, Counter>,
    /// See [`PREEMPTION_VICTIMS`].
    pub preemption_victims: Counter,
    /// See [`WATCHERS`].
    pub watchers: Gauge,
    /// See [`WATCH_QUEUED`].
    pub watch_queued_bytes: Gauge,
    /// See [`WATCHERS_DROPPED`].
    pub watchers_dropped: Family<ReasonLabel, Counter>,
    /// See [`INGEST_THROTTLED`].
    pub ingest_throttled: Counter,
    /// See [`INGEST_REFUSED`].
    pub ingest_refused: Family<ReasonLabel, Counter>,
    /// See [`CONNECTIONS`].
    pub connections: Gauge,
    /// See [`CONNECTIONS_CLOSED`].
    pub connections_closed: Family<ReasonLabel, Counter>,
    /// See [`AUTH_FAILURES`].
    pub auth_failures: Family<ServiceReasonLabel, Counter>,
    /// See [`TOKEN_REVIEWS`].
    pub token_reviews: Family<ResultLabel, Counter>,
    /// See [`TOKEN_CACHE_ENTRIES`].
    pub token_cache_entries: Gauge,
    /// See [`ACCESS_REVIEWS`].
    pub access_reviews: Family<ResultLabel, Counter>,
    /// See [`TLS_RELOADS`].
    pub tls_reloads: Family<ResultLabel, Counter>,
    /// See [`TLS_NOT_AFTER`].
    pub tls_not_after: Gauge,
    /// See [`WATCH_FAILURES`].
    pub watch_failures: Family<WatchLabel, Counter>,
    /// See [`WATCH_RELISTS`].
    pub watch_relists: Family<WatchLabel, Counter>,
    /// See [`WATCH_RELIST_DURATION`].
    pub watch_relist_duration: Family<WatchLabel, Histogram>,
    /// See [`SCHEDULE_ATTEMPTS`].
    pub schedule_attempts: Family<ProfileResultLabel, Counter>,
    /// See [`EXTENSION_POINT_DURATION`].
    pub extension_point_duration: Family<ExtensionPointLabel, Histogram>,
    /// See [`PENDING_PODS`].
    pub pending_pods: Family<QueueLabel, Gauge>,
    /// See [`BIND_DURATION`].
    pub bind_duration: Histogram,
    /// See [`LEADER`].
    pub leader: Gauge,
    /// See [`STALE_NODES`].
    pub stale_nodes: Gauge,
    /// See [`DECISIONS`].
    pub decisions: Gauge,
    /// See [`DESIRED_INTERVAL`].
    pub desired_interval: Gauge<f64, AtomicU64>,
    /// See [`STEPSCALER_POLLS`].
    pub stepscaler_polls: Family<ResultLabel, Counter>,
    /// See [`POD_USAGE_PODS`].
    pub pod_usage_pods: Gauge,
    /// See [`POD_USAGE_REFUSED`].
    pub pod_usage_refused: Counter,
    /// See [`METRICS_API_REQUESTS`].
    pub metrics_api_requests: Family<ResourceResultLabel, Counter>,
    registry: Registry,
}

/// Buckets of extension-point durations: 1 µs to ~0.5 s.
fn extension_point_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_001, 2.0, 20))
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Arc<Metrics> {
        let mut registry = Registry::default();
        let reports_accepted = Counter::default();
        let reports_rejected = Family::<ReasonLabel, Counter>::default();
        let ingest_streams = Gauge::default();
        let nodes = Gauge::default();
        let report_lag = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let score_duration = Histogram::new(exponential_buckets(0.00001, 2.0, 18));
        let binds = Family::<ResultLabel, Counter>::default();
        let scheduling_latency = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        registry.register(
            REPORTS_ACCEPTED,
            "Agent reports accepted",
            reports_accepted.clone(),
        );
        registry.register(
            REPORTS_REJECTED,
            "Agent reports rejected, by reason",
            reports_rejected.clone(),
        );
        registry.register(
            INGEST_STREAMS,
            "Open agent report streams",
            ingest_streams.clone(),
        );
        registry.register(NODES, "Nodes in the store", nodes.clone());
        registry.register(
            REPORT_LAG,
            "Sample time to report arrival",
            report_lag.clone(),
        );
        registry.register(
            SCORE_DURATION,
            "Score call duration",
            score_duration.clone(),
        );
        registry.register(BINDS, "Pod bindings, by result", binds.clone());
        registry.register(
            SCHEDULING_LATENCY,
            "Queue entry to binding",
            scheduling_latency.clone(),
        );
        let extender_requests = Family::<VerbResultLabel, Counter>::default();
        let extender_duration = Family::<VerbLabel, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.00005, 2.0, 18))) as fn() -> Histogram,
        );
        registry.register(
            EXTENDER_REQUESTS,
            "kube-scheduler extender calls, by verb and result",
            extender_requests.clone(),
        );
        registry.register(
            EXTENDER_DURATION,
            "kube-scheduler extender call duration, by verb",
            extender_duration.clone(),
        );
        let preemptions = Family::<ResultLabel, Counter>::default();
        let preemption_victims = Counter::default();
        registry.register(
            PREEMPTIONS,
            "Preemption attempts for unschedulable pods, by result",
            preemptions.clone(),
        );
        registry.register(
            PREEMPTION_VICTIMS,
            "Pods deleted by preemption",
            preemption_victims.clone(),
        );
        let watchers = Gauge::default();
        let watchers_dropped = Family::<ReasonLabel, Counter>::default();
        let watch_queued_bytes = Gauge::default();
        registry.register(
            WATCH_QUEUED,
            "Bytes of node events queued for watchers",
            watch_queued_bytes.clone(),
        );
        let ingest_throttled = Counter::default();
        let ingest_refused = Family::<ReasonLabel, Counter>::default();
        let connections = Gauge::default();
        let connections_closed = Family::<ReasonLabel, Counter>::default();
        registry.register(WATCHERS, "Open WatchNodes streams", watchers.clone());
        registry.register(
            WATCHERS_DROPPED,
            "WatchNodes streams ended by the server, by reason",
            watchers_dropped.clone(),
        );
        registry.register(
            INGEST_THROTTLED,
            "Agent reports held back by the per-stream rate limit",
            ingest_throttled.clone(),
        );
        registry.register(
            INGEST_REFUSED,
            "Agent streams ended by the server, by reason",
            ingest_refused.clone(),
        );
        registry.register(CONNECTIONS, "Open gRPC connections", connections.clone());
        registry.register(
            CONNECTIONS_CLOSED,
            "gRPC connections closed before use, by reason",
            connections_closed.clone(),
        );
        let auth_failures = Family::<ServiceReasonLabel, Counter>::default();
        let token_reviews = Family::<ResultLabel, Counter>::default();
        let token_cache_entries = Gauge::default();
        let access_reviews = Family::<ResultLabel, Counter>::default();
        let tls_reloads = Family::<ResultLabel, Counter>::default();
        let tls_not_after = Gauge::default();
        let watch_failures = Family::<WatchLabel, Counter>::default();
        let watch_relists = Family::<WatchLabel, Counter>::default();
        let watch_relist_duration =
            Family::<WatchLabel, Histogram>::new_with_constructor(relist_histogram as fn() -> _);
        registry.register(
            WATCH_FAILURES,
            "Kubernetes watch failures, by watch",
            watch_failures.clone(),
        );
        registry.register(
            WATCH_RELISTS,
            "Full lists of a Kubernetes watch, by watch",
            watch_relists.clone(),
        );
        registry.register(
            WATCH_RELIST_DURATION,
            "Duration of a watch's full list, by watch",
            watch_relist_duration.clone(),
        );
        registry.register(
            AUTH_FAILURES,
            "Callers refused by authentication or authorisation, by service and reason",
            auth_failures.clone(),
        );
        registry.register(
            TOKEN_REVIEWS,
            "Bearer token reviews, by result",
            token_reviews.clone(),
        );
        registry.register(
            TOKEN_CACHE_ENTRIES,
            "Token review results cached",
            token_cache_entries.clone(),
        );
        registry.register(
            ACCESS_REVIEWS,
            "SubjectAccessReviews, by result",
            access_reviews.clone(),
        );
        registry.register(
            TLS_RELOADS,
            "TLS file reloads, by result",
            tls_reloads.clone(),
        );
        registry.register(
            TLS_NOT_AFTER,
            "The serving certificate's notAfter, Unix seconds",
            tls_not_after.clone(),
        );
        let schedule_attempts = Family::<ProfileResultLabel, Counter>::default();
        let extension_point_duration =
            Family::<ExtensionPointLabel, Histogram>::new_with_constructor(
                extension_point_histogram as fn() -> _,
            );
        let pending_pods = Family::<QueueLabel, Gauge>::default();
        let bind_duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let leader = Gauge::default();
        let stale_nodes = Gauge::default();
        let decisions = Gauge::default();
        let desired_interval = Gauge::<f64, AtomicU64>::default();
        registry.register(
            SCHEDULE_ATTEMPTS,
            "Scheduling attempts, by profile and result",
            schedule_attempts.clone(),
        );
        registry.register(
            EXTENSION_POINT_DURATION,
            "Time a scheduling attempt spent in each extension point, by profile",
            extension_point_duration.clone(),
        );
        registry.register(
            PENDING_PODS,
            "Pods in the scheduling queue, by queue",
            pending_pods.clone(),
        );
        registry.register(
            BIND_DURATION,
            "Assumption to the API server's binding answer",
            bind_duration.clone(),
        );
        registry.register(
            LEADER,
            "1 when this replica holds the scheduler's leader Lease",
            leader.clone(),
        );
        registry.register(STALE_NODES, "Nodes with stale load", stale_nodes.clone());
        registry.register(
            DECISIONS,
            "Placement decisions kept for explain and the web view",
            decisions.clone(),
        );
        registry.register(
            DESIRED_INTERVAL,
            "Report interval asked of agents in acks, seconds (0: no preference)",
            desired_interval.clone(),
        );
        let stepscaler_polls = Family::<ResultLabel, Counter>::default();
        let pod_usage_pods = Gauge::default();
        let metrics_api_requests = Family::<ResourceResultLabel, Counter>::default();
        let pod_usage_refused = Counter::default();
        registry.register(
            POD_USAGE_REFUSED,
            "New pods whose usage was not kept because the book was full",
            pod_usage_refused.clone(),
        );
        registry.register(
            STEPSCALER_POLLS,
            "StepScaler polls, by outcome",
            stepscaler_polls.clone(),
        );
        registry.register(
            POD_USAGE_PODS,
            "Pods whose recent usage is kept for the StepScaler and metrics.k8s.io",
            pod_usage_pods.clone(),
        );
        registry.register(
            METRICS_API_REQUESTS,
            "metrics.k8s.io requests, by resource and HTTP status",
            metrics_api_requests.clone(),
        );
        Arc::new(Metrics {
            schedule_attempts,
            extension_point_duration,
            pending_pods,
            bind_duration,
            leader,
            stale_nodes,
            decisions,
            desired_interval,
            stepscaler_polls,
            pod_usage_pods,
            pod_usage_refused,
            metrics_api_requests,
            watch_failures,
            watch_relists,
            watch_relist_duration,
            auth_failures,
            token_reviews,
            token_cache_entries,
            access_reviews,
            tls_reloads,
            tls_not_after,
            extender_requests,
            extender_duration,
            preemptions,
            preemption_victims,
            watchers,
            watch_queued_bytes,
            watchers_dropped,
            ingest_throttled,
            ingest_refused,
            connections,
            connections_closed,
            reports_accepted,
            reports_rejected,
            ingest_streams,
            nodes,
            report_lag,
            score_duration,
            binds,
            scheduling_latency,
            registry,
        })
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Readiness shared with `/readyz`: a flag, and what currently stands in the way (a failing
/// watch, a refused permission), so that `/readyz` and the operator see why.
#[derive(Debug, Default)]
pub struct Readiness {
    ready: AtomicBool,
    blockers: Mutex<BTreeMap<String, String>>,
}

impl Readiness {
    /// Marks ready or not.
    pub fn set(&self, ready: bool) {
        self.ready.store(ready, Ordering::Release);
    }
    /// Whether ready.
    pub fn get(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }
    /// Records that `what` (e.g. `pods watch`) is failing, and why; replaces an earlier reason.
    pub fn block(&self, what: &str, why: String) {
        let mut b = self.blockers.lock().unwrap_or_else(|p| p.into_inner());
        b.insert(what.to_string(), why);
    }
    /// Records that `what` works again.
    pub fn unblock(&self, what: &str) {
        let mut b = self.blockers.lock().unwrap_or_else(|p| p.into_inner());
        b.remove(what);
    }
    /// The current problems, one `what: why` per entry, sorted by `what`.
    pub fn problems(&self) -> Vec<String> {
        let b = self.blockers.lock().unwrap_or_else(|p| p.into_inner());
        b.iter().map(|(k, v)| format!("{k}: {v}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_lists_what_blocks_it_until_cleared() {
        let r = Readiness::default();
        assert!(!r.get());
        r.block("pods watch", "forbidden".into());
        r.block("nodes watch", "timeout".into());
        r.block("pods watch", "still forbidden".into());
        assert_eq!(
            r.problems(),
            vec!["nodes watch: timeout", "pods watch: still forbidden"]
        );
        r.unblock("nodes watch");
        r.set(true);
        assert!(r.get());
        assert_eq!(r.problems(), vec!["pods watch: still forbidden"]);
    }

    #[test]
    fn encodes_unit_suffixed_names() {
        let m = Metrics::new();
        m.reports_accepted.inc();
        m.reports_rejected
            .get_or_create(&ReasonLabel {
                reason: "field".into(),
            })
            .inc();
        let text = m.encode();
        assert!(
            text.contains("loadstar_scorer_reports_accepted_total 1"),
            "{text}"
        );
        assert!(text.contains("loadstar_scorer_reports_rejected_total{reason=\"field\"} 1"));
        assert!(text.contains("loadstar_scorer_score_duration_seconds_bucket"));
    }
}
