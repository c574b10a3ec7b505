//! The scorer's gRPC server end to end in one process: a real tonic server on 127.0.0.1:0,
//! many concurrent agent streams, Score calls during ingest, malformed reports and garbage
//! bytes on a stream, health and reflection.
use std::time::Duration;

use loadstar_grpc::server;
use loadstar_proto::pb;
use loadstar_proto::pb::scorer_client::ScorerClient;
use loadstar_testkit::agent::{self as simagent, SyntheticLoad};
mod support;

use support::{TestServer, stream};

fn description(cpu: &str, mem: &str) -> pb::ScoreRequest {
    pb::ScoreRequest {
        pod: Some(pb::score_request::Pod::Description(pb::PodDescription {
            name: "web".into(),
            requests: [
                ("cpu".to_string(), cpu.to_string()),
                ("memory".to_string(), mem.to_string()),
            ]
            .into(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

/// Sends `reports` on one stream and returns the acks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_streams_and_scores_concurrently() {
    let server = TestServer::start(server::ServerLimits::default()).await;
    let channel = server.channel().await;
    let nodes = 200usize;
    let mut tasks = Vec::new();
    for i in 0..nodes {
        let channel = channel.clone();
        tasks.push(tokio::spawn(async move {
            let cap = simagent::capacity(16, 64);
            // node-000 is the hot one; the rest are cool.
            let cpu = if i == 0 {
                0.95
            } else {
                0.1 + (i % 10) as f64 * 0.02
            };
            let reports = (1..=5)
                .map(|seq| {
                    simagent::report(
                        &format!("node-{i:03}"),
                        "test",
                        seq,
                        &cap,
                        SyntheticLoad {
                            cpu,
                            ..Default::default()
                        },
                    )
                })
                .collect();
            stream(channel, reports).await
        }));
    }
    // Score while the streams are ingesting.
    let mut scorer = ScorerClient::new(channel.clone());
    for _ in 0..20 {
        scorer
            .score(description("500m", "256Mi"))
            .await
            .expect("score during ingest");
    }
    for t in tasks {
        let acks = t.await.expect("stream task");
        assert!(acks.iter().all(|a| a.accepted), "{acks:?}");
        assert!(acks.iter().all(|a| a.desired_interval_seconds == 1.0));
    }
    let list = scorer
        .list_nodes(pb::ListNodesRequest::default())
        .await
        .expect("list")
        .into_inner();
    assert_eq!(list.nodes.len(), nodes);
    assert!(
        list.nodes
            .iter()
            .all(|n| n.reports_accepted == 5 && !n.stale)
    );
    let resp = scorer
        .score(description("500m", "256Mi"))
        .await
        .expect("score")
        .into_inner();
    assert_eq!(resp.profile, "loadstar");
    assert_eq!(resp.nodes_evaluated as usize, nodes);
    assert!(!resp.ranked.is_empty());
    assert!(
        resp.ranked
            .iter()
            .all(|r| (0.0..=100.0).contains(&r.total_score))
    );
    assert!(resp.ranked[0].plugins.len() > 1, "per-plugin breakdown");
    let hot_rank = resp.ranked.iter().position(|r| r.node_name == "node-000");
    // The hot node (95 % CPU) is either filtered by a load threshold or ranked last-ish.
    match hot_rank {
        None => assert!(
            resp.filtered.iter().any(|f| f.node_name == "node-000"),
            "hot node neither ranked nor filtered"
        ),
        Some(r) => assert!(
            r > nodes / 2,
            "hot node ranked {r} of {}",
            resp.ranked.len()
        ),
    }
    assert_eq!(server.metrics.reports_accepted.get(), (nodes * 5) as u64);
    server.stop().await;
}

#[tokio::test]
async fn malformed_reports_are_rejected_and_the_stream_goes_on() {
    let server = TestServer::start(server::ServerLimits::default()).await;
    let cap = simagent::capacity(8, 32);
    let good = |seq| simagent::report("node-a", "i", seq, &cap, SyntheticLoad::default());
    let mut nan = good(2);
    nan.usage[0].windows[0].mean_ratio = f64::NAN;
    let mut other_node = good(3);
    other_node.node_name = "node-b".into();
    let first = good(1);
    let second = good(2);
    // Sequence 2 again with another sample (the stored report itself may come again).
    let mut replay = second.clone();
    replay.sample_time_unix_nanos += 1;
    let acks = stream(
        server.channel().await,
        vec![first, nan, other_node, second, replay],
    )
    .await;
    assert!(acks[0].accepted);
    assert!(!acks[1].accepted);
    assert!(
        acks[1]
            .reject_reason
            .contains("mean_ratio: non-finite value NaN"),
        "{}",
        acks[1].reject_reason
    );
    assert_eq!(
        acks[2].reject_reason,
        "stream for node node-a sent a report for node node-b"
    );
    assert!(acks[3].accepted, "the stream goes on after rejections");
    assert!(
        acks[4]
            .reject_reason
            .contains("sequence 2 does not follow 2")
    );
    let status = server.store.node_status("node-a").expect("node-a stored");
    assert_eq!(status.reports_accepted, 2);
    assert!(server.store.node_status("node-b").is_none());
    server.stop().await;
}

/// The stream's next item within 5 s (`None`: it ended).
async fn next_ack(acks: &mut tonic::Streaming<pb::ReportAck>) -> Option<pb::ReportAck> {
    tokio::time::timeout(Duration::from_secs(5), acks.message())
        .await
        .expect("an ack within 5 s")
        .expect("no error")
}

/// Opens an Ingest stream to `server`: the sender of its reports and its acks.
async fn open_stream(
    server: &TestServer,
) -> (
    tokio::sync::mpsc::Sender<pb::NodeReport>,
    tonic::Streaming<pb::ReportAck>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let acks = pb::ingest_client::IngestClient::new(server.channel().await)
        .report(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .expect("stream opens")
        .into_inner();
    (tx, acks)
}

/// Waits (≤ 5 s) until the store has accepted `n` reports for `node`.
async fn accepted(store: &loadstar_store::NodeStore, node: &str, n: u64) {
    for _ in 0..500 {
        if store
            .node_status(node)
            .is_some_and(|s| s.reports_accepted == n)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{node} never had {n} accepted reports");
}

#[tokio::test]
async fn sparse_acks_ack_the_first_rejected_paced_and_last_reports() {
    let pace = loadstar_grpc::pacing::Pace::fixed(1.0);
    let server = {
        let pace = pace.clone();
        support::TestServer::start_custom(
            server::ServerLimits::default(),
            loadstar_store::metrics::Metrics::new(),
            loadstar_grpc::gate::Gate::open(),
            None,
            move |parts| parts.pace = pace,
        )
        .await
    };
    let cap = simagent::capacity(8, 32);
    let report = |seq, every: f64| {
        let mut r = simagent::report("node-s", "i", seq, &cap, SyntheticLoad::default());
        r.ack_interval_seconds = every;
        r
    };
    let (tx, mut acks) = open_stream(&server).await;
    let accepted = |n| accepted(&server.store, "node-s", n);
    // The first report is acked; the next ones, within the minute, are stored unacked.
    tx.send(report(1, 60.0)).await.expect("send");
    assert_eq!(next_ack(&mut acks).await.map(|a| a.sequence), Some(1));
    for seq in 2..=4 {
        tx.send(report(seq, 60.0)).await.expect("send");
    }
    accepted(4).await;
    // A rejected report is acked at once (its ack stands for 2 to 4 too).
    let mut bad = report(5, 60.0);
    bad.usage[0].windows[0].mean_ratio = f64::NAN;
    tx.send(bad).await.expect("send");
    let ack = next_ack(&mut acks).await.expect("ack");
    assert_eq!((ack.sequence, ack.accepted), (5, false), "{ack:?}");
    // A new interval asked of the agent is acked at once.
    tx.send(report(6, 60.0)).await.expect("send");
    accepted(5).await;
    pace.set(7.0);
    tx.send(report(7, 60.0)).await.expect("send");
    let ack = next_ack(&mut acks).await.expect("ack");
    assert_eq!((ack.sequence, ack.desired_interval_seconds), (7, 7.0));
    // An ack due by age: a report with a short interval after a pause.
    tx.send(report(8, 60.0)).await.expect("send");
    accepted(7).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    tx.send(report(9, 0.2)).await.expect("send");
    assert_eq!(next_ack(&mut acks).await.map(|a| a.sequence), Some(9));
    // 0: every report acked, as without the field.
    tx.send(report(10, 0.0)).await.expect("send");
    assert_eq!(next_ack(&mut acks).await.map(|a| a.sequence), Some(10));
    // The agent closes its side: the last accepted report's ack still comes, then the end.
    let last_sent = report(11, 60.0);
    tx.send(last_sent.clone()).await.expect("send");
    accepted(10).await;
    drop(tx);
    let last = next_ack(&mut acks).await.expect("the last ack");
    assert_eq!((last.sequence, last.accepted), (11, true));
    assert_eq!(next_ack(&mut acks).await, None);
    let status = server.store.node_status("node-s").expect("stored");
    assert_eq!((status.reports_accepted, status.reports_rejected), (10, 1));
    // The store kept the report's bytes as they came: they decode to what was sent.
    assert_eq!(status.last_report, Some(last_sent));
    server.stop().await;
}

/// The server's shutdown ends an agent stream the agent keeps open: the ack of its stored but
/// unacknowledged report comes, then the stream's end, and the drain is not held open by it.
#[tokio::test]
async fn shutdown_ends_an_open_agent_stream_after_its_last_ack() {
    let server = TestServer::start(server::ServerLimits::default()).await;
    let cap = simagent::capacity(8, 32);
    let report = |seq| {
        let mut r = simagent::report("node-d", "i", seq, &cap, SyntheticLoad::default());
        r.ack_interval_seconds = 60.0;
        r
    };
    let (tx, mut acks) = open_stream(&server).await;
    tx.send(report(1)).await.expect("send");
    assert_eq!(next_ack(&mut acks).await.map(|a| a.sequence), Some(1));
    tx.send(report(2)).await.expect("send");
    accepted(&server.store, "node-d", 2).await;
    let stopping = tokio::spawn(server.stop());
    let last = next_ack(&mut acks).await.expect("the unacked report's ack");
    assert_eq!((last.sequence, last.accepted), (2, true));
    assert_eq!(next_ack(&mut acks).await, None, "then the stream ends");
    stopping
        .await
        .expect("the server drains with the agent's side still open");
    drop(tx);
}

#[tokio::test]
async fn a_broken_stream_still_acks_what_it_stored_before_its_status() {
    use prost::Message as _;
    let server = TestServer::start(server::ServerLimits::default()).await;
    let channel = server.channel().await;
    let cap = simagent::capacity(8, 32);
    let report = |seq| {
        let mut r = simagent::report("node-g", "i", seq, &cap, SyntheticLoad::default());
        r.ack_interval_seconds = 60.0;
        r.encode_to_vec()
    };
    // Two good reports (the second unacked: sparse), then bytes that do not decode.
    let frames = vec![report(1), report(2), vec![0x0a, 0x64, b'a', b'b', b'c']];
    let mut inbound =
        support::raw::ingest(channel, tonic::Request::new(tokio_stream::iter(frames)))
            .await
            .expect("stream opens")
            .into_inner();
    let wait = Duration::from_secs(5);
    let ack = |bytes: Vec<u8>| pb::ReportAck::decode(&bytes[..]).expect("an ack");
    let item = tokio::time::timeout(wait, inbound.message()).await;
    let first = ack(item.expect("in time").expect("ok").expect("first ack"));
    assert_eq!((first.sequence, first.accepted), (1, true));
    let item = tokio::time::timeout(wait, inbound.message()).await;
    let second = ack(item
        .expect("in time")
        .expect("ok")
        .expect("the pending ack"));
    assert_eq!((second.sequence, second.accepted), (2, true));
    let item = tokio::time::timeout(wait, inbound.message()).await;
    let end = item.expect("in time").expect_err("then the status");
    assert_eq!(end.code(), tonic::Code::Internal, "{end:?}");
    server.stop().await;
}

#[tokio::test]
async fn garbage_bytes_end_only_that_stream() {
    let server = TestServer::start(server::ServerLimits::default()).await;
    let channel = server.channel().await;
    // A healthy stream first.
    let cap = simagent::capacity(8, 32);
    let good = |seq| simagent::report("node-ok", "i", seq, &cap, SyntheticLoad::default());
    assert!(stream(channel.clone(), vec![good(1)]).await[0].accepted);
    // Garbage: field 1 declared as a 100-byte string with 3 bytes present, then junk.
    let garbage: Vec<Vec<u8>> = vec![vec![0x0a, 0x64, b'a', b'b', b'c'], vec![0xff; 32]];
    let result = support::raw::ingest(
        channel.clone(),
        tonic::Request::new(tokio_stream::iter(garbage)),
    )
    .await;
    match result {
        Ok(resp) => {
            let mut inbound = resp.into_inner();
            // The scorer ends the stream without an ack for the garbage.
            let next = tokio::time::timeout(Duration::from_secs(5), inbound.message())
                .await
                .expect("the scorer ends the stream promptly");
            assert!(
                matches!(next, Ok(None) | Err(_)),
                "no ack for garbage: {next:?}"
            );
        }
        Err(status) => assert_ne!(status.code(), tonic::Code::Ok),
    }
    // The server and other streams carry on.
    assert!(stream(channel.clone(), vec![good(2)]).await[0].accepted);
    let mut scorer = ScorerClient::new(channel);
    scorer
        .score(description("100m", "64Mi"))
        .await
        .expect("score after garbage");
    server.stop().await;
}

#[tokio::test]
async fn references_without_kubernetes_say_why_and_health_serves() {
    let server = TestServer::start(server::ServerLimits::default()).await;
    let channel = server.channel().await;
    let mut scorer = ScorerClient::new(channel.clone());
    let err = scorer
        .score(pb::ScoreRequest {
            pod: Some(pb::score_request::Pod::Reference(pb::PodReference {
                namespace: "default".into(),
                name: "web".into(),
            })),
            ..Default::default()
        })
        .await
        .expect_err("no kubernetes");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert!(
        err.message().contains("no Kubernetes connection"),
        "{}",
        err.message()
    );
    let err = scorer
        .score(pb::ScoreRequest::default())
        .await
        .expect_err("empty request");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let err = scorer
        .score(pb::ScoreRequest {
            profile: "nope".into(),
            ..description("1", "1Gi")
        })
        .await
        .expect_err("unknown profile");
    assert_eq!(err.code(), tonic::Code::NotFound);
    let err = scorer
        .get_node(pb::GetNodeRequest {
            node_name: "ghost".into(),
        })
        .await
        .expect_err("unknown node");
    assert_eq!(err.code(), tonic::Code::NotFound);
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let resp = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "loadstar.v1.Scorer".into(),
        })
        .await
        .expect("health")
        .into_inner();
    assert_eq!(
        resp.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    let profiles = scorer
        .list_profiles(pb::ListProfilesRequest {})
        .await
        .expect("profiles")
        .into_inner();
    assert_eq!(profiles.profiles[0].name, "loadstar");
    server.stop().await;
}

#[tokio::test]
async fn watch_nodes_sends_snapshot_then_changes() {
    let server = TestServer::start(server::ServerLimits::default()).await;
    let channel = server.channel().await;
    let cap = simagent::capacity(8, 32);
    let r = |node: &str, seq| simagent::report(node, "i", seq, &cap, SyntheticLoad::default());
    assert!(stream(channel.clone(), vec![r("node-a", 1)]).await[0].accepted);
    let mut scorer = ScorerClient::new(channel.clone());
    let mut watch = scorer
        .watch_nodes(pb::WatchNodesRequest::default())
        .await
        .expect("watch")
        .into_inner();
    let first = watch.message().await.expect("event").expect("present");
    assert_eq!(first.kind, pb::node_event::Kind::Added as i32);
    assert_eq!(
        first.node.as_ref().map(|n| n.node_name.as_str()),
        Some("node-a")
    );
    assert!(stream(channel.clone(), vec![r("node-b", 1)]).await[0].accepted);
    let next = tokio::time::timeout(Duration::from_secs(5), watch.message())
        .await
        .expect("change arrives")
        .expect("ok")
        .expect("present");
    assert_eq!(next.kind, pb::node_event::Kind::Added as i32);
    assert_eq!(next.node.map(|n| n.node_name), Some("node-b".to_string()));
    server.stop().await;
}

#[tokio::test]
async fn score_calls_are_recorded_listed_newest_first_and_explained() {
    let server = TestServer::start(server::ServerLimits::default()).await;
    let channel = server.channel().await;
    let cap = simagent::capacity(4, 16);
    let load = SyntheticLoad {
        cpu: 0.2,
        ..SyntheticLoad::default()
    };
    // One stream per node, as agents report.
    for n in ["n1", "n2"] {
        let acks = stream(channel.clone(), vec![simagent::report(n, n, 1, &cap, load)]).await;
        assert!(acks[0].accepted, "{n}: {acks:?}");
    }
    let mut scorer = ScorerClient::new(channel);
    let missing = scorer
        .explain_pod(pb::ExplainPodRequest {
            pod: Some(pb::PodReference {
                namespace: "default".into(),
                name: "web".into(),
            }),
        })
        .await
        .expect_err("nothing recorded yet");
    assert_eq!(missing.code(), tonic::Code::NotFound);
    assert!(
        missing
            .message()
            .contains("not scheduled or scored by Loadstar")
    );
    let empty_name = scorer
        .explain_pod(pb::ExplainPodRequest { pod: None })
        .await
        .expect_err("no pod");
    assert_eq!(empty_name.code(), tonic::Code::InvalidArgument);
    scorer
        .score(description("500m", "256Mi"))
        .await
        .expect("fits");
    scorer
        .score(pb::ScoreRequest {
            pod: Some(pb::score_request::Pod::Description(pb::PodDescription {
                name: "giant".into(),
                requests: [("cpu".to_string(), "64".to_string())].into(),
                ..Default::default()
            })),
            ..Default::default()
        })
        .await
        .expect("scored, none fits");
    let all = scorer
        .list_decisions(pb::ListDecisionsRequest::default())
        .await
        .expect("list")
        .into_inner()
        .decisions;
    let names: Vec<&str> = all
        .iter()
        .map(|d| d.pod.as_ref().map_or("", |p| p.name.as_str()))
        .collect();
    assert_eq!(names, ["giant", "web"], "newest first");
    let giant = &all[0];
    assert_eq!(
        (giant.source.as_str(), giant.outcome.as_str()),
        ("score", "scored")
    );
    assert!(giant.node_name.is_empty());
    assert_eq!(giant.filtered.iter().map(|g| g.count).sum::<u32>(), 2);
    assert_eq!(
        giant
            .filtered
            .iter()
            .map(|g| g.node_names.len())
            .sum::<usize>(),
        2
    );
    assert_eq!(
        giant.summary,
        "0/2 nodes are available: 2 Insufficient cpu."
    );
    // Only what is newer than a seen sequence number.
    let newer = scorer
        .list_decisions(pb::ListDecisionsRequest {
            limit: 10,
            after_seq: all[1].seq,
        })
        .await
        .expect("list")
        .into_inner()
        .decisions;
    assert_eq!(newer.len(), 1);
    let web = scorer
        .explain_pod(pb::ExplainPodRequest {
            pod: Some(pb::PodReference {
                namespace: String::new(),
                name: "web".into(),
            }),
        })
        .await
        .expect("recorded")
        .into_inner();
    assert_eq!(web.nodes_feasible, 2);
    assert!(!web.node_name.is_empty());
    assert!(web.ranked[0].plugins.iter().any(|p| p.weight > 0));
    server.stop().await;
}
