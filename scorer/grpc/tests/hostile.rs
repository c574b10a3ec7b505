//! Hostile clients against a real in-process scorer on 127.0.0.1:0, one test per attack of
//! `docs/security.md`: each asserts the documented status and that the store holds no bad
//! data; watcher memory is checked through the server's own accounting (queued bytes), not
//! wall-clock timing. Raw HTTP/2 (the `h2` crate) plays the clients that never read.
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use loadstar_framework::snapshot::PodInfo;
use loadstar_grpc::gate::Gate;
use loadstar_grpc::server::ServerLimits;
use loadstar_grpc::status::MAX_STATUS_MESSAGE_BYTES;
use loadstar_proto::limits;
use loadstar_proto::pb;
use loadstar_proto::pb::ingest_client::IngestClient;
use loadstar_proto::pb::scheduler_client::SchedulerClient;
use loadstar_proto::pb::scorer_client::ScorerClient;
use loadstar_store::cluster::{BindOutcome, BindRequest, Binder, ClusterError, PodResolver};
use loadstar_store::metrics::{Metrics, ReasonLabel};
use loadstar_testkit::agent::{self as simagent, SyntheticLoad, now_nanos, report_at_limits};
use loadstar_testkit::wire;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

mod support;

use support::{TestServer, stream};

/// The largest status message C-core and Python clients accept (their metadata limit).
const STATUS_LIMIT: usize = 16 * 1024;

fn report(node: &str, instance: &str, seq: u64) -> pb::NodeReport {
    simagent::report(
        node,
        instance,
        seq,
        &simagent::capacity(8, 32),
        SyntheticLoad::default(),
    )
}

/// Waits until `cond` holds, up to `within`; fails with what was last seen.
async fn eventually<T: std::fmt::Debug>(
    within: Duration,
    what: &str,
    mut probe: impl FnMut() -> T,
    cond: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        let v = probe();
        if cond(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: last seen {v:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `wanted` unread WatchNodes calls on one connection; the server's advertised
/// concurrent-stream limit once its SETTINGS arrived.
async fn unread_watchers(addr: &str, wanted: usize) -> (usize, Vec<h2::client::ResponseFuture>) {
    let host = addr.trim_start_matches("http://");
    let (client, held, _conn) = wire::unread_watch_calls(host, wanted)
        .await
        .expect("calls issued");
    let max = eventually(
        Duration::from_secs(5),
        "the server's SETTINGS",
        || client.current_max_send_streams(),
        |m| *m != usize::MAX,
    )
    .await;
    (max, held)
}

#[tokio::test]
async fn unread_watchers_on_one_connection_stay_bounded() {
    let mut limits = ServerLimits {
        max_streams_per_connection: 64,
        ..ServerLimits::default()
    };
    limits.query.watch.max_watchers = 40;
    // The scorer-wide cap is under test here, not one caller's share of it.
    limits.query.watch.max_watchers_per_caller = 40;
    limits.query.watch.max_queued_bytes = 256 * 1024;
    let server = TestServer::start(limits).await;
    // 3 000 WatchNodes calls on one connection that never reads.
    let (max_streams, held) = unread_watchers(&server.addr, 3000).await;
    assert_eq!(
        max_streams, 64,
        "the server advertises its per-connection stream limit"
    );
    let watchers = eventually(
        Duration::from_secs(5),
        "watchers registered",
        || server.metrics.watchers.get(),
        |w| *w >= 40,
    )
    .await;
    assert_eq!(watchers, 40, "the watcher cap holds");
    let drops = |reason: &str| {
        server
            .metrics
            .watchers_dropped
            .get_or_create(&ReasonLabel {
                reason: reason.into(),
            })
            .get()
    };

    // Agents keep reporting for 200 nodes: ~2 000 node events, megabytes per watcher.
    let mut agents = Vec::new();
    for n in 0..200 {
        let channel = server.channel().await;
        agents.push(tokio::spawn(async move {
            let reports: Vec<_> = (1..=10)
                .map(|s| report(&format!("node-{n}"), "i", s))
                .collect();
            stream(channel, reports).await
        }));
    }
    let mut peak = 0i64;
    for a in agents {
        let acks = a.await.expect("agent");
        assert!(acks.iter().all(|a| a.accepted));
        peak = peak.max(server.metrics.watch_queued_bytes.get());
    }
    let bound = 40 * 256 * 1024;
    assert!(
        peak <= bound,
        "queued {peak} bytes over 40 watchers; the bound is {bound}"
    );
    let dropped = server.metrics.encode();
    assert!(
        dropped.contains("loadstar_scorer_watchers_dropped_total{reason=\"lagging\"}")
            && dropped.contains("loadstar_scorer_watchers_dropped_total{reason=\"limit\"}"),
        "lagging and over-limit watchers are counted:\n{dropped}"
    );
    // Dropped watchers hold nothing.
    let after = eventually(
        Duration::from_secs(5),
        "lagging watchers' queues freed",
        || server.metrics.watch_queued_bytes.get(),
        |b| *b == 0,
    )
    .await;
    assert_eq!(after, 0);
    // Every one of the 40 fell behind and was cut off: its slot is free at once, although
    // its client still holds the stream open and has not read a byte. (No queued call takes
    // a freed slot: a client that never reads never frees its 64 streams, so the other
    // calls never leave it.)
    let remaining = eventually(
        Duration::from_secs(5),
        "lagging watchers' slots released",
        || server.metrics.watchers.get(),
        |w| *w == 0,
    )
    .await;
    assert_eq!(remaining, 0);
    assert_eq!(drops("lagging"), 40, "each cut off exactly once");
    assert_eq!(held.len(), 3000, "the client still holds every call");
    drop(held);
    server.stop().await;
}

#[tokio::test]
async fn a_lagging_watcher_is_told_resource_exhausted() {
    let mut limits = ServerLimits::default();
    limits.query.watch.max_queued_bytes = 64 * 1024;
    let server = TestServer::start(limits).await;
    let mut client = ScorerClient::new(server.channel().await);
    let mut watch = client
        .watch_nodes(pb::WatchNodesRequest::default())
        .await
        .expect("watch")
        .into_inner();
    // Not read while ~50 large events go by (far past windows and the 64 KiB queue).
    let channel = server.channel().await;
    for seq in 1..=50u64 {
        let acks = stream(channel.clone(), vec![report_at_limits("node-a", "i", seq)]).await;
        assert!(acks[0].accepted);
    }
    let mut ended = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(5), watch.message()).await {
            Ok(Ok(Some(_))) => continue,
            Ok(Err(status)) => {
                ended = Some(status);
                break;
            }
            other => panic!("the watch ended without a status: {other:?}"),
        }
    }
    let status = ended.expect("a status within 20 s");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("watch again"), "{status:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_second_stream_cannot_take_over_a_live_node() {
    let server = TestServer::start(ServerLimits::default()).await;
    let mut client = IngestClient::new(server.channel().await);
    // The real agent's stream, kept open.
    let (owner_tx, rx) = mpsc::channel(4);
    let mut owner_acks = client
        .report(ReceiverStream::new(rx))
        .await
        .expect("owner stream")
        .into_inner();
    owner_tx
        .send(report("node-x", "real", 1))
        .await
        .expect("send");
    assert!(
        owner_acks
            .message()
            .await
            .expect("ack")
            .expect("ack")
            .accepted
    );
    // An intruder with another instance: its report is refused and its stream ended.
    let (tx, rx) = mpsc::channel(4);
    let mut intruder = IngestClient::new(server.channel().await)
        .report(ReceiverStream::new(rx))
        .await
        .expect("intruder stream")
        .into_inner();
    let mut fake = report("node-x", "fake", 1);
    fake.usage.clear();
    tx.send(fake).await.expect("send");
    let ack = intruder.message().await.expect("ack").expect("ack");
    assert!(!ack.accepted);
    assert!(ack.reject_reason.contains("another live stream"), "{ack:?}");
    let status = intruder.message().await.expect_err("then a status");
    assert_eq!(status.code(), Code::AlreadyExists, "{status:?}");
    assert!(status.message().contains("\"real\""), "{status:?}");
    let node = server.store.node_status("node-x").expect("node");
    let last = node.last_report.expect("report");
    assert_eq!(
        last.agent_instance, "real",
        "the store kept the owner's data"
    );
    assert!(
        server
            .metrics
            .encode()
            .contains("loadstar_scorer_ingest_streams_refused_total{reason=\"owned\"} 1")
    );
    // The owner goes on; when its stream ends, a restarted agent takes over at once.
    owner_tx
        .send(report("node-x", "real", 2))
        .await
        .expect("send");
    assert!(
        owner_acks
            .message()
            .await
            .expect("ack")
            .expect("ack")
            .accepted
    );
    drop(owner_tx);
    while let Ok(Some(_)) = owner_acks.message().await {}
    let acks = stream(
        server.channel().await,
        vec![report("node-x", "restarted", 1)],
    )
    .await;
    let accepted = acks[0].accepted;
    assert!(
        accepted,
        "the restarted agent owns the node once the old stream ended"
    );
    server.stop().await;
}

/// The `loadstar_scorer_ingest_streams` gauge as the metrics endpoint shows it.
fn open_streams(metrics: &Metrics) -> Option<String> {
    metrics
        .encode()
        .lines()
        .find(|l| l.starts_with("loadstar_scorer_ingest_streams "))
        .map(str::to_string)
}

#[tokio::test]
async fn an_agent_that_vanishes_mid_stream_gives_its_node_back() {
    let server = TestServer::start(ServerLimits::default()).await;
    // The agent in a runtime of its own, so it can vanish as a dying process does: its
    // sockets closed with the stream unfinished (no end of reports, no reset).
    let agent = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("agent runtime");
    let (acked, ack) = tokio::sync::oneshot::channel();
    let addr = server.addr.clone();
    agent.spawn(async move {
        let channel = tonic::transport::Channel::from_shared(addr)
            .expect("uri")
            .connect()
            .await
            .expect("connect");
        let (tx, rx) = mpsc::channel(4);
        let mut acks = IngestClient::new(channel)
            .report(ReceiverStream::new(rx))
            .await
            .expect("stream")
            .into_inner();
        tx.send(report("node-v", "gone", 1)).await.expect("send");
        let first = acks.message().await.expect("ack").expect("ack");
        let _ = acked.send(first.accepted);
        std::future::pending::<()>().await; // holds tx and acks until the runtime dies
    });
    assert!(ack.await.expect("the agent's first ack"), "accepted");
    assert_eq!(
        open_streams(&server.metrics).as_deref(),
        Some("loadstar_scorer_ingest_streams 1")
    );
    agent.shutdown_background();
    eventually(
        Duration::from_secs(10),
        "the vanished stream counted closed",
        || open_streams(&server.metrics),
        |g| g.as_deref() == Some("loadstar_scorer_ingest_streams 0"),
    )
    .await;
    // Its node is free: a restarted agent's first report is accepted.
    let acks = stream(server.channel().await, vec![report("node-v", "back", 1)]).await;
    assert!(acks[0].accepted, "{acks:?}");
    assert_eq!(
        server
            .store
            .node_status("node-v")
            .and_then(|n| n.last_report)
            .map(|r| r.agent_instance),
        Some("back".to_string())
    );
    server.stop().await;
}

#[tokio::test]
async fn oversized_reports_end_the_stream_with_a_status() {
    let server = TestServer::start(ServerLimits::default()).await;
    let mut r = report("node-big", "i", 1);
    r.collector_errors.push(pb::CollectorError {
        collector: "x".into(),
        message: "y".repeat(limits::MAX_MESSAGE_BYTES + 1),
    });
    let (tx, rx) = mpsc::channel(1);
    let mut acks = IngestClient::new(server.channel().await)
        .report(ReceiverStream::new(rx))
        .await
        .expect("stream")
        .into_inner();
    tx.send(r).await.expect("send");
    let status = acks.message().await.expect_err("a status, not OK");
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert!(status.message().contains("too large"), "{status:?}");
    assert!(server.store.node_status("node-big").is_none());
    server.stop().await;
}

#[tokio::test]
async fn the_largest_valid_report_fits_the_message_limit() {
    let r = report_at_limits("node-max", "i", 1);
    let len = r.encoded_len();
    assert!(
        len < limits::MAX_MESSAGE_BYTES,
        "a report at every cap is {len} bytes; the limit {} must leave room",
        limits::MAX_MESSAGE_BYTES
    );
    let server = TestServer::start(ServerLimits::default()).await;
    let acks = stream(server.channel().await, vec![r]).await;
    assert!(acks[0].accepted, "{}", acks[0].reject_reason);
    server.stop().await;
}

#[tokio::test]
async fn long_text_fields_are_refused_and_lists_come_in_pages() {
    let server = TestServer::start(ServerLimits::default()).await;
    let mut r = report("node-t", "i", 1);
    r.collector_errors.push(pb::CollectorError {
        collector: "disk".into(),
        message: "z".repeat(4 * 1024 * 1024 - 1024),
    });
    // 4 MB text within a (raised) message limit would still be refused by its field cap.
    let big = ServerLimits {
        max_message_bytes: 8 << 20,
        ..ServerLimits::default()
    };
    let roomy = TestServer::start(big).await;
    let acks = stream(roomy.channel().await, vec![r]).await;
    assert!(!acks[0].accepted);
    assert!(
        acks[0].reject_reason.contains(
            "collector_errors[0].message is 4193280 bytes long, more than the limit 1024"
        ),
        "{:?}",
        acks[0]
    );
    assert!(roomy.store.node_status("node-t").is_none());
    roomy.stop().await;
    // Ten nodes whose statuses are ~0.8 MiB each: no page passes a default client's 4 MiB.
    for n in 0..10 {
        let acks = stream(
            server.channel().await,
            vec![report_at_limits(&format!("node-{n:02}"), "i", 1)],
        )
        .await;
        assert!(acks[0].accepted);
    }
    let mut client = ScorerClient::new(server.channel().await);
    let mut token = String::new();
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let page = client
            .list_nodes(pb::ListNodesRequest {
                page_size: 0,
                page_token: token.clone(),
            })
            .await
            .expect("a page within the default 4 MiB client limit")
            .into_inner();
        assert!(page.encoded_len() <= 4 << 20);
        pages += 1;
        seen.extend(page.nodes.iter().map(|n| n.node_name.clone()));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let want: Vec<String> = (0..10).map(|n| format!("node-{n:02}")).collect();
    assert_eq!(seen, want, "every node exactly once, in order");
    assert!(pages >= 3, "{pages} pages");
    server.stop().await;
}

/// Counts `record` calls per `ingest_stream` span: the span's fields must not grow with the
/// number of reports.
#[derive(Default)]
struct RecordCounter {
    ingest_spans: Mutex<HashMap<u64, usize>>,
    max_records: AtomicUsize,
}

impl<S> tracing_subscriber::Layer<S> for &'static RecordCounter
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_record(
        &self,
        id: &tracing::span::Id,
        _values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if ctx.span(id).is_some_and(|s| s.name() == "ingest_stream") {
            let mut m = self.ingest_spans.lock().unwrap_or_else(|p| p.into_inner());
            let n = m.entry(id.into_u64()).or_default();
            *n += 1;
            self.max_records.fetch_max(*n, Ordering::Relaxed);
        }
    }
}

#[tokio::test]
async fn stream_spans_record_the_node_once() {
    use tracing_subscriber::layer::SubscriberExt;
    static COUNTER: OnceLock<&'static RecordCounter> = OnceLock::new();
    let counter = *COUNTER.get_or_init(|| {
        let c: &'static RecordCounter = Box::leak(Box::default());
        let subscriber = tracing_subscriber::registry().with(c);
        tracing::subscriber::set_global_default(subscriber).expect("one global subscriber");
        c
    });
    let server = TestServer::start(ServerLimits::default()).await;
    let reports: Vec<_> = (1..=60).map(|s| report("node-span", "i", s)).collect();
    let acks = stream(server.channel().await, reports).await;
    assert!(acks.iter().all(|a| a.accepted));
    let spans = counter
        .ingest_spans
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .len();
    assert!(spans >= 1, "the ingest stream span was seen");
    assert_eq!(
        counter.max_records.load(Ordering::Relaxed),
        1,
        "60 reports recorded the node once"
    );
    server.stop().await;
}

#[tokio::test]
async fn error_messages_that_quote_input_stay_small() {
    let server = TestServer::start(ServerLimits::default()).await;
    let acks = stream(server.channel().await, vec![report("known", "i", 1)]).await;
    assert!(acks[0].accepted);
    let mut client = ScorerClient::new(server.channel().await);
    let pod = |candidates: Vec<String>, profile: String| pb::ScoreRequest {
        pod: Some(pb::score_request::Pod::Description(pb::PodDescription {
            name: "p".into(),
            ..Default::default()
        })),
        candidate_nodes: candidates,
        profile,
        ..Default::default()
    };
    let check = |s: tonic::Status, code: Code| {
        assert_eq!(
            s.code(),
            code,
            "{}",
            &s.message()[..s.message().len().min(200)]
        );
        assert!(
            s.message().len() < STATUS_LIMIT,
            "{} bytes",
            s.message().len()
        );
        s
    };
    // 10 000 unknown candidates.
    let many: Vec<String> = (0..10_000).map(|i| format!("ghost-{i}")).collect();
    let s = client
        .score(pod(many, String::new()))
        .await
        .expect_err("unknown");
    let s = check(s, Code::NotFound);
    assert!(s.message().contains("… and 9997 more"), "{}", s.message());
    // A 20 KB profile name.
    let s = client
        .score(pod(vec![], "p".repeat(20_000)))
        .await
        .expect_err("unknown profile");
    check(s, Code::NotFound);
    // 800 KB of one repeated name: de-duplicated, answered as one node.
    let repeated = vec!["known".to_string(); 100_000];
    let answer = client
        .score(pod(repeated, String::new()))
        .await
        .expect("scored")
        .into_inner();
    assert_eq!(answer.ranked.len() + answer.filtered.len(), 1);
    assert!(answer.encoded_len() < 64 * 1024);
    // Too many distinct names.
    let distinct: Vec<String> = (0..20_001).map(|i| format!("n{i}")).collect();
    let s = client
        .score(pod(distinct, String::new()))
        .await
        .expect_err("cap");
    check(s, Code::InvalidArgument);
    // A 100 KB node name on GetNode, a 100 KB quantity in a description.
    let s = client
        .get_node(pb::GetNodeRequest {
            node_name: "n".repeat(100_000),
        })
        .await
        .expect_err("unknown node");
    check(s, Code::NotFound);
    let mut bad = pod(vec![], String::new());
    if let Some(pb::score_request::Pod::Description(d)) = &mut bad.pod {
        d.requests.insert("cpu".into(), "9".repeat(100_000));
    }
    let s = client.score(bad).await.expect_err("bad quantity");
    check(s, Code::InvalidArgument);
    // A stream that switches to a 100 KB node name: the ack's reason stays small.
    let acks = stream(
        server.channel().await,
        vec![report("known-2", "j", 1), {
            let mut r = report("known-2", "j", 2);
            r.node_name = "m".repeat(100_000);
            r
        }],
    )
    .await;
    assert!(!acks[1].accepted);
    assert!(
        acks[1].reject_reason.len() < 512,
        "{}",
        acks[1].reject_reason.len()
    );
    server.stop().await;
}

/// A cluster integration that quotes the client's names whole, as the Kubernetes cache once
/// did: whatever it says, the status layer caps what reaches the client.
#[derive(Debug)]
struct EchoingCluster;

#[async_trait::async_trait]
impl PodResolver for EchoingCluster {
    async fn resolve(&self, namespace: &str, name: &str) -> Result<PodInfo, ClusterError> {
        Err(ClusterError::NotFound(format!(
            "pod {namespace}/{name} is not in the cluster"
        )))
    }
}

#[async_trait::async_trait]
impl Binder for EchoingCluster {
    async fn bind(&self, r: BindRequest) -> Result<BindOutcome, ClusterError> {
        Err(ClusterError::NotFound(format!(
            "pod {}/{} is not in the cluster (node {})",
            r.namespace, r.name, r.node_name
        )))
    }
}

#[tokio::test]
async fn megabyte_pod_namespace_and_node_names_are_echoed_briefly() {
    let server = TestServer::start_custom(
        ServerLimits::default(),
        Metrics::new(),
        Gate::open(),
        None,
        |parts| {
            parts.resolver = Some(Arc::new(EchoingCluster));
            parts.binder = Some(Arc::new(EchoingCluster));
        },
    )
    .await;
    // ~1 MB, under the 1 MiB message limit once framed.
    let huge = "z".repeat(1_000_000);
    let prefix = "z".repeat(32);
    let pod = |namespace: &str, name: &str| pb::PodReference {
        namespace: namespace.into(),
        name: name.into(),
    };
    let check = |s: tonic::Status, max: usize| {
        assert_eq!(
            s.code(),
            Code::NotFound,
            "{}",
            &s.message()[..s.message().len().min(200)]
        );
        assert!(
            s.message().len() <= max,
            "{} bytes, more than {max}",
            s.message().len()
        );
        assert!(
            s.message().contains(&prefix),
            "names a prefix of the input: {}",
            &s.message()[..s.message().len().min(200)]
        );
    };
    let mut scorer = ScorerClient::new(server.channel().await);
    let mut scheduler = SchedulerClient::new(server.channel().await);
    for (namespace, name) in [(huge.as_str(), "web"), ("shop", huge.as_str())] {
        // ExplainPod quotes the names itself: small.
        let s = scorer
            .explain_pod(pb::ExplainPodRequest {
                pod: Some(pod(namespace, name)),
            })
            .await
            .expect_err("never scored");
        check(s, 1024);
        // Score by reference and Bind: the resolver's and binder's whole echo is cut.
        let s = scorer
            .score(pb::ScoreRequest {
                pod: Some(pb::score_request::Pod::Reference(pod(namespace, name))),
                ..Default::default()
            })
            .await
            .expect_err("no such pod");
        check(s, MAX_STATUS_MESSAGE_BYTES);
        let s = scheduler
            .bind(pb::BindRequest {
                pod: Some(pod(namespace, name)),
                ..Default::default()
            })
            .await
            .expect_err("no such pod");
        check(s, MAX_STATUS_MESSAGE_BYTES);
    }
    let s = scheduler
        .bind(pb::BindRequest {
            pod: Some(pod("shop", "web")),
            node_name: huge.clone(),
            ..Default::default()
        })
        .await
        .expect_err("no such node");
    check(s, MAX_STATUS_MESSAGE_BYTES);
    server.stop().await;
}

#[tokio::test]
async fn implausible_values_are_refused_and_never_stored() {
    let server = TestServer::start(ServerLimits::default()).await;
    let now = now_nanos();
    type Mutate = Box<dyn Fn(&mut pb::NodeReport)>;
    let cases: Vec<(&str, Mutate, &str)> = vec![
        (
            "nic-nan",
            Box::new(|r| {
                r.nics.push(pb::NicUsage {
                    name: "eth0".into(),
                    rx_bytes_per_second: f64::NAN,
                    ..Default::default()
                })
            }),
            "].rx_bytes_per_second: non-finite",
        ),
        (
            "nic-neg",
            Box::new(|r| {
                r.nics.push(pb::NicUsage {
                    name: "eth0".into(),
                    tx_bytes_per_second: -5.0,
                    ..Default::default()
                })
            }),
            "].tx_bytes_per_second: value -5 outside",
        ),
        (
            "disk-neg",
            Box::new(|r| {
                r.disks.push(pb::DiskUsage {
                    name: "sda".into(),
                    read_iops: -1.0,
                    ..Default::default()
                })
            }),
            "].read_iops: value -1 outside",
        ),
        (
            "gpu-hot",
            Box::new(|r| {
                r.gpus.push(pb::GpuUsage {
                    temperature_celsius: 1e6,
                    ..Default::default()
                })
            }),
            "].temperature_celsius: value 1000000 outside",
        ),
        (
            "time-zero",
            Box::new(|r| r.sample_time_unix_nanos = 0),
            "unset or before 1970",
        ),
        (
            "time-min",
            Box::new(|r| r.sample_time_unix_nanos = i64::MIN),
            "unset or before 1970",
        ),
        (
            "time-max",
            Box::new(|r| r.sample_time_unix_nanos = i64::MAX),
            "ahead of the scorer's clock",
        ),
        (
            "time-century",
            Box::new(move |r| r.sample_time_unix_nanos = now + 100 * 365 * 86_400 * 1_000_000_000),
            "ahead of the scorer's clock",
        ),
        (
            "time-old",
            Box::new(move |r| r.sample_time_unix_nanos = now - 3_600 * 1_000_000_000),
            "behind the scorer's clock",
        ),
        (
            "window-order",
            Box::new(|r| {
                let w = &mut r.usage[0].windows[0];
                w.min_ratio = 0.9;
                w.max_ratio = 0.1;
            }),
            "window statistics out of order",
        ),
        (
            "mean-above-max",
            Box::new(|r| {
                let w = &mut r.usage[0].windows[0];
                w.mean_ratio = 0.95;
                w.max_ratio = 0.5;
                w.p95_ratio = 0.5;
            }),
            "window statistics out of order",
        ),
        (
            "cpus",
            Box::new(|r| r.capacity.as_mut().expect("cap").logical_cpus = u32::MAX),
            "capacity.logical_cpus: value 4294967295 outside",
        ),
        (
            "memory",
            Box::new(|r| r.capacity.as_mut().expect("cap").memory_bytes = 1 << 60),
            "capacity.memory_bytes",
        ),
        (
            "nic-speed",
            Box::new(|r| {
                r.capacity.as_mut().expect("cap").nics[0].speed_bits_per_second = u64::MAX
            }),
            "capacity.nics[0].speed_bits_per_second",
        ),
        (
            "version",
            Box::new(|r| r.agent_version = "v".repeat(200)),
            "agent_version is 200 bytes long",
        ),
    ];
    let mut reports = Vec::new();
    for (i, (name, mutate, _)) in cases.iter().enumerate() {
        let mut r = report(&format!("bad-{name}"), "i", i as u64 + 1);
        mutate(&mut r);
        reports.push(r);
    }
    for ((name, _, want), r) in cases.iter().zip(reports) {
        let acks = stream(server.channel().await, vec![r]).await;
        assert!(!acks[0].accepted, "{name} was accepted");
        assert!(
            acks[0].reject_reason.contains(want),
            "{name}: {}",
            acks[0].reject_reason
        );
        assert!(
            server.store.node_status(&format!("bad-{name}")).is_none(),
            "{name} stored"
        );
    }
    // Time does not run backwards within one agent instance.
    let first = report("node-clock", "i", 1);
    let mut second = report("node-clock", "i", 2);
    second.sample_time_unix_nanos = first.sample_time_unix_nanos - 1_000_000_000;
    let acks = stream(server.channel().await, vec![first.clone(), second]).await;
    assert!(acks[0].accepted && !acks[1].accepted);
    assert!(
        acks[1]
            .reject_reason
            .contains("earlier than this agent's previous sample")
    );
    let kept = server.store.node_status("node-clock").expect("node");
    assert_eq!(
        kept.last_report.expect("report").sample_time_unix_nanos,
        first.sample_time_unix_nanos
    );
    server.stop().await;
}

/// Reads until the server closes the connection; how long that took.
async fn closed_within(mut tcp: TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match tokio::time::timeout_at(
            tokio::time::Instant::from_std(start + limit),
            tcp.read(&mut buf),
        )
        .await
        {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => continue,
            Err(_) => return None,
        }
    }
}

#[tokio::test]
async fn idle_and_surplus_connections_are_closed() {
    let mut limits = ServerLimits::default();
    limits.connections.handshake_timeout = Duration::from_millis(300);
    limits.keepalive_interval = Duration::from_millis(300);
    limits.keepalive_timeout = Duration::from_millis(300);
    let server = TestServer::start(limits).await;
    let host = server.addr.trim_start_matches("http://").to_string();
    // 50 connections that never send the preface, and one that sends half of it.
    let mut idle = Vec::new();
    for _ in 0..50 {
        idle.push(TcpStream::connect(&host).await.expect("connect"));
    }
    let mut half = TcpStream::connect(&host).await.expect("connect");
    half.write_all(b"PRI * HTTP/2.0\r\n").await.expect("write");
    idle.push(half);
    let mut closed = 0;
    for tcp in idle {
        if closed_within(tcp, Duration::from_secs(5)).await.is_some() {
            closed += 1;
        }
    }
    assert_eq!(closed, 51, "every pre-preface connection is closed");
    assert!(
        server
            .metrics
            .encode()
            .contains("loadstar_scorer_connections_closed_total{reason=\"no_preface\"} 51")
    );
    // A client that finishes the preface, then never answers a ping: keepalive closes it.
    let mut mute = TcpStream::connect(&host).await.expect("connect");
    mute.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .expect("preface and empty SETTINGS");
    assert!(
        closed_within(mute, Duration::from_secs(10)).await.is_some(),
        "a peer that never acknowledges pings is closed"
    );
    server.stop().await;
    // Past the connection cap, a new connection is closed on accept (a server whose
    // handshake deadline cannot release a slot during the test).
    let mut limits = ServerLimits::default();
    limits.connections.max_connections = 60;
    let server = TestServer::start(limits).await;
    let host = server.addr.trim_start_matches("http://").to_string();
    let mut hold = Vec::new();
    for _ in 0..60 {
        hold.push(TcpStream::connect(&host).await.expect("connect"));
    }
    let surplus = TcpStream::connect(&host).await.expect("connect");
    assert!(
        closed_within(surplus, Duration::from_secs(2))
            .await
            .is_some(),
        "the 61st connection is closed at once"
    );
    assert!(
        server
            .metrics
            .encode()
            .contains("loadstar_scorer_connections_closed_total{reason=\"limit\"} 1")
    );
    drop(hold);
    server.stop().await;
}

#[tokio::test]
async fn a_report_flood_is_paced() {
    let mut limits = ServerLimits::default();
    limits.ingest.reports_per_second = 50.0;
    limits.ingest.burst = 10;
    let server = TestServer::start(limits).await;
    let reports: Vec<_> = (1..=110).map(|s| report("node-flood", "i", s)).collect();
    let start = Instant::now();
    let acks = stream(server.channel().await, reports).await;
    let took = start.elapsed();
    assert!(acks.iter().all(|a| a.accepted));
    // 10 from the burst, the other 100 at 50/s: at least ~2 s, however fast the machine.
    assert!(
        took >= Duration::from_millis(1900),
        "110 reports took {took:?}"
    );
    assert!(server.metrics.ingest_throttled.get() > 0);
    server.stop().await;
}

#[tokio::test]
async fn megabyte_pod_names_are_refused_before_the_decision_log_keeps_them() {
    let log = Arc::new(loadstar_store::decisions::DecisionLog::default());
    let server = TestServer::start_custom(
        ServerLimits::default(),
        Metrics::new(),
        Gate::open(),
        None,
        |parts| parts.decisions = log.clone(),
    )
    .await;
    let acks = stream(server.channel().await, vec![report("known", "i", 1)]).await;
    assert!(acks[0].accepted);
    let mut client = ScorerClient::new(server.channel().await);
    let described = |namespace: String, name: String| pb::ScoreRequest {
        pod: Some(pb::score_request::Pod::Description(pb::PodDescription {
            namespace,
            name,
            ..Default::default()
        })),
        ..Default::default()
    };
    // ~1 MB names, distinct each time: each would have kept megabytes in the log.
    for i in 0..5 {
        let huge = format!("{i}{}", "n".repeat(1_000_000));
        for request in [
            described("ns".into(), huge.clone()),
            described(huge.clone(), "web".into()),
        ] {
            let s = client.score(request).await.expect_err("too long");
            assert_eq!(s.code(), Code::InvalidArgument, "{}", &s.message()[..200]);
            assert!(s.message().len() < 1024, "{} bytes", s.message().len());
        }
    }
    assert!(log.is_empty(), "nothing refused was recorded");
    // A name at Kubernetes' limit is scored and recorded.
    let longest = "l".repeat(loadstar_common::text::NAME_MAX);
    client
        .score(described("ns".into(), longest.clone()))
        .await
        .expect("scored");
    assert!(log.get("ns", &longest).is_some());
    server.stop().await;
}
