//! `loadstar-attack`: the hostile clients of `docs/security.md`, against a running scorer,
//! for `bench/hostile.sh`. Each attack prints one JSON line of figures: the scorer's RSS
//! before / peak / after (from `/proc/<pid>/status`), its CPU, gRPC health latency while the
//! attack runs, and what the scorer did (statuses, closed connections). Loopback only.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use loadstar_proto::pb;
use loadstar_proto::pb::ingest_client::IngestClient;
use loadstar_proto::pb::scorer_client::ScorerClient;
use loadstar_testkit::agent::{self as simagent, SyntheticLoad};
use loadstar_testkit::wire;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// Attack flags.
#[derive(Debug, Parser)]
#[command(name = "loadstar-attack", version, about)]
struct Args {
    /// Scorer gRPC endpoint (loopback).
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    scorer: String,
    /// The scorer's PID, for RSS and CPU figures.
    #[arg(long)]
    scorer_pid: Option<u32>,
    /// Which attack.
    #[command(subcommand)]
    attack: Attack,
}

#[derive(Debug, Subcommand)]
enum Attack {
    /// WatchNodes calls on one HTTP/2 connection that never reads, held for `hold` seconds.
    Watchers {
        /// Calls to open.
        #[arg(long, default_value_t = 3000)]
        count: usize,
        /// Seconds to hold them.
        #[arg(long, default_value_t = 20.0)]
        hold: f64,
        /// Meanwhile, this many nodes report at every size cap (~0.8 MiB each) once a
        /// second, so each change is large.
        #[arg(long, default_value_t = 0)]
        large_nodes: usize,
    },
    /// TCP connections that never send the HTTP/2 preface.
    Idle {
        /// Connections to open.
        #[arg(long, default_value_t = 500)]
        count: usize,
    },
    /// Two reports of ~4 MB each, then ListNodes from a default client (4 MiB limit).
    BigReports,
    /// Reports as fast as one stream takes them.
    Flood {
        /// Reports to send.
        #[arg(long, default_value_t = 30_000)]
        reports: u64,
    },
}

/// Samples the scorer's RSS (KiB) and CPU ticks while an attack runs.
struct Probe {
    peak_kib: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    health_ms: Arc<std::sync::Mutex<Vec<f64>>>,
    health_failures: Arc<AtomicU64>,
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn cpu_ticks(pid: u32) -> Option<u64> {
    loadstar_common::procstat::cpu_ticks(
        &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
    )
}

impl Probe {
    fn start(pid: Option<u32>, scorer: String) -> Probe {
        let p = Probe {
            peak_kib: Arc::new(AtomicU64::new(pid.and_then(rss_kib).unwrap_or(0))),
            stop: Arc::new(AtomicBool::new(false)),
            health_ms: Arc::default(),
            health_failures: Arc::default(),
        };
        if let Some(pid) = pid {
            let (peak, stop) = (p.peak_kib.clone(), p.stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(r) = rss_kib(pid) {
                        peak.fetch_max(r, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
        }
        let (lat, fails, stop) = (
            p.health_ms.clone(),
            p.health_failures.clone(),
            p.stop.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let ok = tokio::time::timeout(Duration::from_secs(5), async {
                    let channel = tonic::transport::Endpoint::from_shared(scorer.clone())
                        .ok()?
                        .connect()
                        .await
                        .ok()?;
                    let mut c = HealthClient::new(channel);
                    c.check(HealthCheckRequest::default()).await.ok()
                })
                .await
                .ok()
                .flatten()
                .is_some();
                if ok {
                    lat.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(t.elapsed().as_secs_f64() * 1e3);
                } else {
                    fails.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        p
    }

    /// Stops sampling; the figures as JSON fields.
    fn finish(self, rss_before_kib: u64) -> String {
        self.stop.store(true, Ordering::Relaxed);
        let mut lat = self
            .health_ms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        lat.sort_by(f64::total_cmp);
        let pct = |q: f64| {
            lat.get(((lat.len() as f64 * q) as usize).min(lat.len().saturating_sub(1)))
                .copied()
                .unwrap_or(f64::NAN)
        };
        format!(
            "\"rss_before_mib\":{:.1},\"rss_peak_mib\":{:.1},\"health_checks\":{},\
             \"health_failures\":{},\"health_p50_ms\":{:.1},\"health_p99_ms\":{:.1},\
             \"health_max_ms\":{:.1}",
            rss_before_kib as f64 / 1024.0,
            self.peak_kib.load(Ordering::Relaxed) as f64 / 1024.0,
            lat.len(),
            self.health_failures.load(Ordering::Relaxed),
            pct(0.5),
            pct(0.99),
            lat.last().copied().unwrap_or(f64::NAN),
        )
    }
}

/// `nodes` agents, each streaming a report at every size cap once a second until `stop`.
fn large_reporters(scorer: &str, nodes: usize, stop: Arc<AtomicBool>) -> Arc<AtomicU64> {
    let accepted = Arc::new(AtomicU64::new(0));
    for n in 0..nodes {
        let (scorer, stop, accepted) = (scorer.to_string(), stop.clone(), accepted.clone());
        tokio::spawn(async move {
            let Ok(client) = IngestClient::connect(scorer).await else {
                return;
            };
            let mut client = client.max_encoding_message_size(4 << 20);
            let (tx, rx) = mpsc::channel(2);
            let Ok(acks) = client.report(ReceiverStream::new(rx)).await else {
                return;
            };
            let mut acks = acks.into_inner();
            let mut seq = 0;
            while !stop.load(Ordering::Relaxed) {
                seq += 1;
                let r = simagent::report_at_limits(&format!("large-{n}"), "attack", seq);
                if tx.send(r).await.is_err() {
                    return;
                }
                if let Ok(Some(a)) = acks.message().await
                    && a.accepted
                {
                    accepted.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }
    accepted
}

async fn watchers(
    scorer: &str,
    host: &str,
    count: usize,
    hold: f64,
    large_nodes: usize,
) -> Result<String> {
    let stop = Arc::new(AtomicBool::new(false));
    let large = large_reporters(scorer, large_nodes, stop.clone());
    let (client, held, conn) = wire::unread_watch_calls(host, count).await?;
    // What the scorer answered each call, read as soon as all are sent (one deadline for
    // all): a refusal is a trailers-only response carrying its grpc-status in the headers;
    // an admitted watch has response headers without one, and its stream is then held
    // unread.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (mut admitted, mut refused, mut unanswered) = (0usize, 0usize, 0usize);
    let mut codes = std::collections::BTreeMap::<String, usize>::new();
    let mut open = Vec::new();
    for resp in held {
        match tokio::time::timeout_at(deadline, resp).await {
            Ok(Ok(r)) => match r.headers().get("grpc-status") {
                None => {
                    admitted += 1;
                    open.push(r);
                }
                Some(code) => {
                    refused += 1;
                    *codes
                        .entry(String::from_utf8_lossy(code.as_bytes()).into_owned())
                        .or_default() += 1;
                }
            },
            _ => unanswered += 1,
        }
    }
    tokio::time::sleep(Duration::from_secs_f64(hold)).await;
    stop.store(true, Ordering::Relaxed);
    let max = client.current_max_send_streams();
    drop(open);
    drop(client);
    conn.abort();
    let codes: Vec<String> = codes
        .iter()
        .map(|(code, n)| format!("\"{code}\":{n}"))
        .collect();
    Ok(format!(
        "\"calls\":{count},\"admitted\":{admitted},\"refused\":{refused},\
         \"refused_grpc_status\":{{{}}},\"unanswered\":{unanswered},\
         \"server_max_concurrent_streams\":{max},\"large_nodes\":{large_nodes},\
         \"large_reports_accepted\":{}",
        codes.join(","),
        large.load(Ordering::Relaxed)
    ))
}

async fn idle(host: &str, count: usize) -> Result<String> {
    let start = Instant::now();
    let mut conns = Vec::with_capacity(count);
    for _ in 0..count {
        conns.push(TcpStream::connect(host).await?);
    }
    let waits = conns.into_iter().map(|mut c| async move {
        let mut buf = [0u8; 64];
        let r = tokio::time::timeout(Duration::from_secs(30), c.read(&mut buf)).await;
        matches!(r, Ok(Ok(0)) | Ok(Err(_))).then(|| start.elapsed().as_secs_f64())
    });
    let mut closed: Vec<f64> = futures_join(waits).await.into_iter().flatten().collect();
    closed.sort_by(f64::total_cmp);
    let within_10s = closed.iter().filter(|t| **t <= 10.0).count();
    Ok(format!(
        "\"connections\":{count},\"closed_by_server\":{},\"closed_within_10s_pct\":{:.1},\
         \"close_p50_s\":{:.2},\"close_max_s\":{:.2}",
        closed.len(),
        100.0 * within_10s as f64 / count.max(1) as f64,
        closed.get(closed.len() / 2).copied().unwrap_or(f64::NAN),
        closed.last().copied().unwrap_or(f64::NAN)
    ))
}

/// Runs the futures concurrently and collects their outputs in order.
async fn futures_join<F: std::future::Future + Send + 'static>(
    futs: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        if let Ok(v) = h.await {
            out.push(v);
        }
    }
    out
}

async fn big_reports(scorer: &str) -> Result<String> {
    let cap = simagent::capacity(8, 32);
    let mut codes = Vec::new();
    for n in 0..2 {
        let mut r = simagent::report(
            &format!("big-{n}"),
            "attack",
            1,
            &cap,
            SyntheticLoad::default(),
        );
        r.collector_errors.push(pb::CollectorError {
            collector: "x".into(),
            message: "y".repeat(4_000_000),
        });
        let mut client = IngestClient::connect(scorer.to_string())
            .await?
            .max_encoding_message_size(64 << 20);
        let (tx, rx) = mpsc::channel(1);
        let mut acks = client.report(ReceiverStream::new(rx)).await?.into_inner();
        tx.send(r).await?;
        let code = match acks.message().await {
            Ok(Some(a)) if a.accepted => "accepted".to_string(),
            Ok(Some(a)) => format!("rejected: {}", a.reject_reason),
            Ok(None) => "ended with OK and no ack".to_string(),
            Err(s) => format!("{:?}", s.code()),
        };
        codes.push(code);
    }
    // A default client: 4 MiB receive limit.
    let mut client = ScorerClient::connect(scorer.to_string()).await?;
    let list = match client.list_nodes(pb::ListNodesRequest::default()).await {
        Ok(r) => format!("OK, {} nodes", r.into_inner().nodes.len()),
        Err(s) => format!("{:?}: {}", s.code(), s.message()),
    };
    Ok(format!(
        "\"report_1\":{:?},\"report_2\":{:?},\"list_nodes\":{:?}",
        codes[0], codes[1], list
    ))
}

async fn flood(scorer: &str, pid: Option<u32>, reports: u64) -> Result<String> {
    let cap = simagent::capacity(8, 32);
    let mut client = IngestClient::connect(scorer.to_string()).await?;
    let (tx, rx) = mpsc::channel(1024);
    let mut acks = client.report(ReceiverStream::new(rx)).await?.into_inner();
    let cpu0 = pid.and_then(cpu_ticks);
    let start = Instant::now();
    let sender = tokio::spawn(async move {
        for seq in 1..=reports {
            let r = simagent::report("flood-node", "attack", seq, &cap, SyntheticLoad::default());
            if tx.send(r).await.is_err() {
                break;
            }
        }
    });
    let (mut accepted, mut rejected) = (0u64, 0u64);
    let deadline = start + Duration::from_secs(60);
    while accepted + rejected < reports && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(5), acks.message()).await {
            Ok(Ok(Some(a))) if a.accepted => accepted += 1,
            Ok(Ok(Some(_))) => rejected += 1,
            _ => break,
        }
    }
    let secs = start.elapsed().as_secs_f64();
    sender.abort();
    let cpu = match (cpu0, pid.and_then(cpu_ticks)) {
        (Some(a), Some(b)) => (b - a) as f64 / loadstar_common::procstat::USER_HZ / secs,
        _ => f64::NAN,
    };
    Ok(format!(
        "\"sent_for_s\":{secs:.1},\"acked\":{},\"accepted\":{accepted},\"rejected\":{rejected},\
         \"reports_per_s\":{:.1},\"scorer_cores\":{cpu:.3}",
        accepted + rejected,
        (accepted + rejected) as f64 / secs
    ))
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let host = args
        .scorer
        .strip_prefix("http://")
        .context("--scorer must be http://HOST:PORT")?
        .to_string();
    if !host.starts_with("127.") && !host.starts_with("localhost") && !host.starts_with("[::1]") {
        bail!("loadstar-attack only targets loopback addresses, not {host}");
    }
    let before = args.scorer_pid.and_then(rss_kib).unwrap_or(0);
    let probe = Probe::start(args.scorer_pid, args.scorer.clone());
    let (name, figures) = match args.attack {
        Attack::Watchers {
            count,
            hold,
            large_nodes,
        } => (
            "watchers",
            watchers(&args.scorer, &host, count, hold, large_nodes).await?,
        ),
        Attack::Idle { count } => ("idle", idle(&host, count).await?),
        Attack::BigReports => ("big_reports", big_reports(&args.scorer).await?),
        Attack::Flood { reports } => (
            "flood",
            flood(&args.scorer, args.scorer_pid, reports).await?,
        ),
    };
    let probe_figures = probe.finish(before);
    // Memory once the attacker has gone.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = args.scorer_pid.and_then(rss_kib).unwrap_or(0);
    println!(
        "{{\"attack\":\"{name}\",{figures},{probe_figures},\"rss_after_mib\":{:.1}}}",
        after as f64 / 1024.0
    );
    Ok(())
}
