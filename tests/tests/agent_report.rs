//! The agent daemon against scorer stubs (the example's `Ingest` service, with behaviours
//! of their own here) on
//! 127.0.0.1: reports arrive with plausible values and the bearer token; the agent survives a
//! graceful scorer restart and a hard kill on the same port, resuming with full windows;
//! every address a name resolves to gets a stream; a stalled scorer never stalls sampling;
//! shutdown is bounded and ends the streams.
mod agent_support;
/// The stub scorer's `Ingest` service, shared with the agent's `stub_scorer` example.
#[path = "../../agent/examples/stub_scorer/ingest.rs"]
mod stub_ingest;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_support::{assert_valid, eventually, usage};
use clap::Parser;
use loadstar_agent::config::AgentConfig;
use loadstar_agent::daemon::Daemon;
use loadstar_agent::report::{Resolve, SystemResolver};
use loadstar_proto::pb::{self, Resource};
use stub_ingest::{Acks, Scorer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_stream::StreamExt;
use tonic::{Request, Status, Streaming};

/// What a stub received.
#[derive(Default)]
struct Log {
    reports: Vec<pb::NodeReport>,
    authorization: Vec<Option<String>>,
    streams_ended: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Behaviour {
    /// Read reports and ack each.
    Ack,
    /// Accept the stream but never read or answer.
    Stall,
    /// Refuse unless the bearer token matches.
    RequireToken(&'static str),
}

struct Stub {
    log: Arc<Mutex<Log>>,
    behaviour: Behaviour,
    stopping: tokio::sync::watch::Receiver<bool>,
}

impl Scorer for Stub {
    fn accept(
        &self,
        request: Request<Streaming<pb::NodeReport>>,
        tx: Acks,
    ) -> Result<impl Future<Output = ()> + Send + 'static, Status> {
        let auth = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        if let Behaviour::RequireToken(t) = self.behaviour
            && auth.as_deref() != Some(&format!("Bearer {t}"))
        {
            return Err(Status::unauthenticated("bad token"));
        }
        self.log.lock().expect("lock").authorization.push(auth);
        let mut inbound = request.into_inner();
        let log = self.log.clone();
        let mut stopping = self.stopping.clone();
        let behaviour = self.behaviour;
        Ok(async move {
            if behaviour == Behaviour::Stall {
                let _hold = (inbound, tx);
                let _ = stopping.wait_for(|s| *s).await;
                return;
            }
            loop {
                tokio::select! {
                    msg = inbound.next() => match msg {
                        Some(Ok(r)) => {
                            let seq = r.sequence;
                            log.lock().expect("lock").reports.push(r);
                            let ack = pb::ReportAck { sequence: seq, accepted: true, ..Default::default() };
                            if tx.send(Ok(ack)).await.is_err() { break; }
                        }
                        _ => {
                            log.lock().expect("lock").streams_ended += 1;
                            break;
                        }
                    },
                    _ = until_true(&mut stopping) => {
                        let _ = tx.send(Err(Status::unavailable("scorer shutting down"))).await;
                        break;
                    }
                }
            }
        })
    }
}

async fn until_true(rx: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// A stub scorer on its own runtime and thread, so it can be killed like a crashed process.
struct StubServer {
    addr: SocketAddr,
    log: Arc<Mutex<Log>>,
    stop: Option<std::sync::mpsc::Sender<bool>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl StubServer {
    fn start(addr: SocketAddr, behaviour: Behaviour) -> StubServer {
        Self::start_tls(addr, behaviour, None)
    }

    /// With `tls = Some(identity)`, serves TLS.
    fn start_tls(
        addr: SocketAddr,
        behaviour: Behaviour,
        tls: Option<tonic::transport::Identity>,
    ) -> StubServer {
        let log = Arc::new(Mutex::new(Log::default()));
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<bool>();
        let l = log.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("runtime");
            let (stopping_tx, stopping) = tokio::sync::watch::channel(false);
            let listener = rt.block_on(async {
                // A restart on the same port waits for the killed stub's listener to close
                // (its runtime shuts down in the background), as a restarted scorer would.
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                let listener = loop {
                    match tokio::net::TcpListener::bind(addr).await {
                        Ok(l) => break l,
                        Err(e)
                            if e.kind() == std::io::ErrorKind::AddrInUse
                                && std::time::Instant::now() < deadline =>
                        {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Err(e) => panic!("bind stub on {addr}: {e}"),
                    }
                };
                addr_tx
                    .send(listener.local_addr().expect("addr"))
                    .expect("send addr");
                listener
            });
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let mut shutdown = stopping.clone();
            let mut builder = tonic::transport::Server::builder();
            if let Some(identity) = tls {
                builder = builder
                    .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
                    .expect("server TLS");
            }
            let server = rt.spawn(
                builder
                    .add_service(stub_ingest::service(Stub {
                        log: l,
                        behaviour,
                        stopping,
                    }))
                    .serve_with_incoming_shutdown(incoming, async move {
                        let _ = shutdown.wait_for(|s| *s).await;
                    }),
            );
            let graceful = stop_rx.recv().unwrap_or(false);
            if graceful {
                let _ = stopping_tx.send(true);
                rt.block_on(async {
                    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
                });
            }
            // Graceful or not, whatever is left dies with the runtime, like a killed process.
            rt.shutdown_background();
        });
        let addr = addr_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("stub bound");
        StubServer {
            addr,
            log,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    fn stop(mut self, graceful: bool) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(graceful);
        }
        if let Some(t) = self.thread.take() {
            t.join().expect("stub thread");
        }
    }

    fn reports(&self) -> Vec<pb::NodeReport> {
        self.log.lock().expect("lock").reports.clone()
    }
}

impl Drop for StubServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(false);
        }
    }
}

fn agent_config(scorer: &str, extra: &[&str]) -> AgentConfig {
    let mut args = vec![
        "loadstar-agent",
        "--scorer",
        scorer,
        "--node-name",
        "itest-node",
        "--interval",
        "100ms",
        "--windows",
        "1s,5s",
        "--backoff-initial",
        "50ms",
        "--backoff-max",
        "300ms",
        "--metrics-addr",
        "127.0.0.1:0",
        "--gpu=false",
    ];
    args.extend_from_slice(extra);
    AgentConfig::try_parse_from(args).expect("valid flags")
}

async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .expect("write");
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.expect("read");
    let status = buf
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, buf)
}

/// The value of one series (name and labels) of the daemon's `/metrics`; 0 when absent.
fn metric(daemon: &Daemon, series: &str) -> u64 {
    let prefix = format!("{series} ");
    daemon
        .metrics()
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Waits until the daemon counted at least `n` failed connections or streams to `scorer`.
async fn wait_report_errors(daemon: &Daemon, scorer: &str, n: u64, what: &str) {
    let series = format!("loadstar_agent_report_errors_total{{scorer=\"{scorer}\"}}");
    eventually(what, Duration::from_secs(5), || {
        let got = metric(daemon, &series);
        async move {
            if got >= n {
                Ok(())
            } else {
                Err(format!("{got} errors"))
            }
        }
    })
    .await;
}

async fn wait_reports(stub: &StubServer, n: usize, what: &str) -> Vec<pb::NodeReport> {
    eventually(what, Duration::from_secs(15), || {
        let r = stub.reports();
        async move {
            if r.len() >= n {
                Ok(r)
            } else {
                Err(format!("{} reports", r.len()))
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_reports_and_survives_scorer_restarts() {
    let a = StubServer::start("127.0.0.1:0".parse().expect("addr"), Behaviour::Ack);
    let addr = a.addr;
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").expect("token");
    let config = agent_config(
        &format!("http://{addr}"),
        &["--token-file", token.to_str().expect("utf-8")],
    );
    let daemon = Daemon::start(&config, Arc::new(SystemResolver))
        .await
        .expect("start");

    // Plausible reports with the token.
    let got = wait_reports(&a, 5, "reports at the first scorer").await;
    for w in got.windows(2) {
        assert!(w[1].sequence > w[0].sequence, "sequences increase");
    }
    let last = got.last().expect("some");
    assert_eq!(last.node_name, "itest-node");
    assert_eq!(last.agent_version, loadstar_common::VERSION);
    assert_eq!(last.agent_instance.len(), 32);
    assert_eq!(last.sample_interval_seconds, 0.1);
    let cap = last.capacity.as_ref().expect("capacity");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    assert!(cap.logical_cpus >= cpus, "{} < {cpus}", cap.logical_cpus);
    assert!(cap.memory_bytes > 64 << 20);
    assert_valid(last);
    let cpu = usage(last, Resource::Cpu).expect("cpu");
    let labels: Vec<u32> = cpu.windows.iter().map(|w| w.window_seconds).collect();
    assert_eq!(labels, vec![1, 5]);
    assert!(cpu.windows[1].sample_count >= 3, "{:?}", cpu.windows);
    assert!(usage(last, Resource::Memory).expect("memory").latest_ratio > 0.0);
    assert!(
        a.log
            .lock()
            .expect("lock")
            .authorization
            .iter()
            .all(|t| t.as_deref() == Some("Bearer s3cret"))
    );

    // /metrics and /healthz.
    let maddr = daemon.metrics_addr().expect("metrics on");
    let (status, body) = http_get(maddr, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        body.contains("loadstar_agent_scorers_connected 1"),
        "{body}"
    );
    assert!(body.contains(&format!(
        "loadstar_agent_reports_sent_total{{scorer=\"{addr}\"}}"
    )));
    assert!(body.contains("loadstar_node_utilization_ratio{resource=\"cpu\"}"));
    assert_eq!(http_get(maddr, "/healthz").await.0, 200);

    // Graceful scorer restart on the same port.
    let before = a.reports();
    let last_a = before.last().expect("some").clone();
    a.stop(true);
    eventually(
        "agent notices the scorer left",
        Duration::from_secs(5),
        || {
            let n = daemon.metrics().scorers_connected();
            async move {
                if n == 0 {
                    Ok(())
                } else {
                    Err(format!("{n} connected"))
                }
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await; // sampling goes on meanwhile
    let b = StubServer::start(addr, Behaviour::Ack);
    let first_b = wait_reports(&b, 1, "reports after a graceful restart").await[0].clone();
    assert!(
        first_b.sequence >= last_a.sequence + 4,
        "sampling continued while disconnected: {} then {}",
        last_a.sequence,
        first_b.sequence
    );
    assert_eq!(first_b.agent_instance, last_a.agent_instance);
    let count = |r: &pb::NodeReport| usage(r, Resource::Cpu).expect("cpu").windows[1].sample_count;
    assert!(
        count(&first_b) > count(&last_a),
        "the first report after reconnect has full windows"
    );

    // Hard kill (connections reset, no goodbye) and restart on the same port.
    let b_all = wait_reports(&b, 3, "more reports at b").await;
    let last_b = b_all.last().cloned().expect("some");
    let b_seqs: Vec<u64> = b_all.iter().map(|r| r.sequence).collect();
    b.stop(false);
    let c = StubServer::start(addr, Behaviour::Ack);
    let first_c = wait_reports(&c, 1, "reports after a hard kill").await[0].clone();
    // The current report goes first on a new stream, even if the killed scorer had it.
    assert!(
        first_c.sequence >= last_b.sequence,
        "c first {} b last {} (b saw {b_seqs:?})",
        first_c.sequence,
        last_b.sequence
    );
    let (_, body) = http_get(maddr, "/metrics").await;
    assert!(
        body.contains("loadstar_agent_scorers_connected 1"),
        "{body}"
    );

    // Bounded shutdown: the stream ends from the agent's side.
    let started = std::time::Instant::now();
    daemon.shutdown().await.expect("clean shutdown");
    assert!(started.elapsed() < Duration::from_secs(5));
    eventually(
        "the scorer sees the stream end",
        Duration::from_secs(5),
        || {
            let n = c.log.lock().expect("lock").streams_ended;
            async move {
                if n >= 1 {
                    Ok(())
                } else {
                    Err("stream still open".into())
                }
            }
        },
    )
    .await;
    c.stop(true);
}

/// Resolves one name to a list of addresses the test controls.
struct StaticResolver(Arc<Mutex<Vec<SocketAddr>>>);

impl Resolve for StaticResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        _port: u16,
    ) -> Pin<Box<dyn std::future::Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>>
    {
        let addrs = self.0.lock().expect("lock").clone();
        Box::pin(async move {
            if host == "scorers.test" {
                Ok(addrs)
            } else {
                Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "unknown host",
                ))
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_resolved_address_gets_a_stream() {
    let one = StubServer::start("127.0.0.1:0".parse().expect("addr"), Behaviour::Ack);
    let port = one.addr.port();
    let two = StubServer::start(SocketAddr::from(([127, 0, 0, 2], port)), Behaviour::Ack);
    let addrs = Arc::new(Mutex::new(vec![one.addr, two.addr]));
    let config = agent_config(
        &format!("http://scorers.test:{port}"),
        &["--resolve-interval", "200ms"],
    );
    let daemon = Daemon::start(&config, Arc::new(StaticResolver(addrs.clone())))
        .await
        .expect("start");
    wait_reports(&one, 2, "reports at replica one").await;
    wait_reports(&two, 2, "reports at replica two").await;
    assert_eq!(daemon.metrics().scorers_connected(), 2);

    // Replica two leaves the DNS answer: its stream is dropped, replica one keeps going.
    addrs.lock().expect("lock").retain(|a| *a == one.addr);
    eventually("replica two dropped", Duration::from_secs(5), || {
        let n = daemon.metrics().scorers_connected();
        async move {
            if n == 1 {
                Ok(())
            } else {
                Err(format!("{n} connected"))
            }
        }
    })
    .await;
    let n_two = two.reports().len();
    let n_one = one.reports().len();
    wait_reports(&one, n_one + 3, "replica one continues").await;
    assert!(
        two.reports().len() <= n_two + 1,
        "no more reports to a removed address"
    );
    daemon.shutdown().await.expect("clean shutdown");
    one.stop(true);
    two.stop(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_scorer_never_stalls_sampling() {
    let stub = StubServer::start("127.0.0.1:0".parse().expect("addr"), Behaviour::Stall);
    let config = agent_config(
        &format!("http://{}", stub.addr),
        &["--shutdown-timeout", "1s"],
    );
    let daemon = Daemon::start(&config, Arc::new(SystemResolver))
        .await
        .expect("start");
    let samples = |d: &Daemon| metric(d, "loadstar_agent_samples_total");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let s0 = samples(&daemon);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let s1 = samples(&daemon);
    assert!(
        s1 - s0 >= 8,
        "10 samples expected in 1 s at 100 ms, got {}",
        s1 - s0
    );
    assert!(stub.reports().is_empty());
    // The stalled scorer never answers: shutdown still completes within its bound.
    let started = std::time::Instant::now();
    let _ = daemon.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    stub.stop(false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_token_is_counted_and_retried() {
    let stub = StubServer::start(
        "127.0.0.1:0".parse().expect("addr"),
        Behaviour::RequireToken("right"),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, "wrong").expect("token");
    let config = agent_config(
        &format!("http://{}", stub.addr),
        &["--token-file", token.to_str().expect("utf-8")],
    );
    let daemon = Daemon::start(&config, Arc::new(SystemResolver))
        .await
        .expect("start");
    let scorer = stub.addr.to_string();
    wait_report_errors(&daemon, &scorer, 2, "two failed attempts").await;
    assert!(stub.reports().is_empty());
    // The token file is re-read on each attempt: fixing it is enough.
    std::fs::write(&token, "right").expect("token");
    wait_reports(&stub, 1, "reports once the token is right").await;
    daemon.shutdown().await.expect("clean shutdown");
    stub.stop(true);
}

/// A CA and a certificate for `localhost` signed by it.
fn make_certs(dir: &std::path::Path) -> (std::path::PathBuf, tonic::transport::Identity) {
    let pki = loadstar_testkit::pki::server_cert(dir, "DNS:localhost").expect("openssl");
    let cert = std::fs::read(&pki.cert).expect("cert");
    let key = std::fs::read(&pki.key).expect("key");
    (pki.ca, tonic::transport::Identity::from_pem(cert, key))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_ca_file_and_a_bearer_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, identity) = make_certs(dir.path());
    let stub = StubServer::start_tls(
        "127.0.0.1:0".parse().expect("addr"),
        Behaviour::RequireToken("tls-token"),
        Some(identity),
    );
    let token = dir.path().join("token");
    std::fs::write(&token, "tls-token").expect("token");
    // `localhost` is resolved by the system resolver; the certificate is checked against it.
    let config = agent_config(
        &format!("https://localhost:{}", stub.addr.port()),
        &[
            "--tls-ca",
            ca.to_str().expect("utf-8"),
            "--token-file",
            token.to_str().expect("utf-8"),
        ],
    );
    let daemon = Daemon::start(&config, Arc::new(SystemResolver))
        .await
        .expect("start");
    let got = wait_reports(&stub, 2, "reports over TLS").await;
    assert_valid(&got[1]);
    daemon.shutdown().await.expect("clean shutdown");
    stub.stop(true);

    // Without the CA the server certificate is not trusted: nothing arrives.
    let (_, identity) = make_certs(dir.path());
    let stub = StubServer::start_tls(
        "127.0.0.1:0".parse().expect("addr"),
        Behaviour::Ack,
        Some(identity),
    );
    let other_ca = tempfile::tempdir().expect("tempdir");
    let (wrong_ca, _) = make_certs(other_ca.path());
    let config = agent_config(
        &format!("https://localhost:{}", stub.addr.port()),
        &["--tls-ca", wrong_ca.to_str().expect("utf-8")],
    );
    let daemon = Daemon::start(&config, Arc::new(SystemResolver))
        .await
        .expect("start");
    let scorer = format!("127.0.0.1:{}", stub.addr.port());
    wait_report_errors(&daemon, &scorer, 1, "a failed TLS handshake").await;
    assert!(stub.reports().is_empty());
    daemon.shutdown().await.expect("clean shutdown");
    stub.stop(true);
}
