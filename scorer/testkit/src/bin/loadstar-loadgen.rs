//! `loadstar-loadgen`: simulates N agents, each with its own report stream at a fixed rate,
//! against a running scorer, and prints what it cost and how fresh the scorer stayed:
//! accepted/rejected/delayed reports, ack latency, sample-to-visibility lag (via
//! `WatchNodes`), and the scorer's CPU use when its PID is given. With sparse acks
//! (`--ack-interval`, the agent's default) an ack stands for the reports before it:
//! `acks_accepted` counts the window's reports acknowledged as accepted (waiting an ack
//! interval after the window for the last ones), `acks_received` the acks themselves.
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::Parser;
use loadstar_common::pace;
use loadstar_proto::pb;
use loadstar_proto::pb::ingest_client::IngestClient;
use loadstar_proto::pb::scorer_client::ScorerClient;
use loadstar_testkit::agent::{self as simagent, SyntheticLoad};
use tokio::sync::{Mutex, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

/// Load generator flags.
#[derive(Debug, Parser)]
#[command(name = "loadstar-loadgen", version, about)]
struct Args {
    /// Scorer gRPC endpoint.
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    scorer: String,
    /// Number of simulated agents (one report stream each).
    #[arg(long, default_value_t = 1000)]
    agents: usize,
    /// HTTP/2 connections the streams are spread over (real agents use one each; one
    /// process cannot hold thousands of connections cheaply).
    #[arg(long, default_value_t = 50)]
    connections: usize,
    /// Report interval per agent, seconds.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// Measured run time after the warm-up, seconds.
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// Warm-up before measuring, seconds.
    #[arg(long, default_value_t = 5.0)]
    warmup: f64,
    /// Nodes whose visibility lag is measured through WatchNodes.
    #[arg(long, default_value_t = 100)]
    probe_nodes: usize,
    /// PID of the scorer, to report its CPU use.
    #[arg(long)]
    scorer_pid: Option<u32>,
    /// Node name prefix.
    #[arg(long, default_value = "sim")]
    prefix: String,
    /// Follow the report interval the scorer asks for in its acks, as real agents do, on
    /// each node's grid of it (`loadstar_common::pace`; default: report every --interval
    /// regardless).
    #[arg(long)]
    follow_pace: bool,
    /// `ack_interval_seconds` in every report: how far apart the scorer's acks of accepted
    /// reports may be (0: an ack per report); by default the agent's.
    #[arg(long, default_value_t = loadstar_proto::limits::DEFAULT_ACK_INTERVAL_SECONDS as f64)]
    ack_interval: f64,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    acks: AtomicU64,
    accepted: AtomicU64,
    rejected: AtomicU64,
    delayed: AtomicU64,
    late_sends: AtomicU64,
    /// Largest paced interval any agent was asked for, milliseconds.
    max_pace_ms: AtomicU64,
}

fn cpu_ticks(pid: u32) -> Option<u64> {
    loadstar_common::procstat::cpu_ticks(
        &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
    )
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let endpoint = Endpoint::from_shared(args.scorer.clone()).context("scorer endpoint")?;
    let mut channels = Vec::new();
    for _ in 0..simagent::connections_for(args.agents, args.connections) {
        channels.push(
            endpoint
                .connect()
                .await
                .context("connecting to the scorer")?,
        );
    }
    let counters = Arc::new(Counters::default());
    let ack_latencies = Arc::new(Mutex::new(Vec::<f64>::new()));
    let measuring = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let interval = Duration::from_secs_f64(args.interval.max(0.01));
    let instance = format!("loadgen-{}", std::process::id());
    // The paced agents' grids start here, as an agent's starts with its stream.
    let origin = tokio::time::Instant::now();
    for i in 0..args.agents {
        let channel: Channel = channels[i % channels.len()].clone();
        let counters = counters.clone();
        let lat = ack_latencies.clone();
        let measuring = measuring.clone();
        let node = format!("{}-{i:05}", args.prefix);
        let grid_phase = pace::phase_of(&node);
        let instance = instance.clone();
        let follow_pace = args.follow_pace;
        let ack_interval = args.ack_interval;
        let pace = Arc::new(AtomicU64::new(0f64.to_bits()));
        // Staggered start so reports spread over the interval like real agents.
        let offset = interval.mul_f64(i as f64 / args.agents.max(1) as f64);
        tokio::spawn(async move {
            let cap = simagent::capacity(16, 64);
            let (tx, rx) = mpsc::channel::<pb::NodeReport>(4);
            let mut client = IngestClient::new(channel);
            let sent_at = Arc::new(Mutex::new(
                std::collections::BTreeMap::<u64, (Instant, bool)>::new(),
            ));
            let Ok(resp) = client.report(ReceiverStream::new(rx)).await else {
                return;
            };
            let mut acks = resp.into_inner();
            {
                let sent_at = sent_at.clone();
                let counters = counters.clone();
                let pace = pace.clone();
                tokio::spawn(async move {
                    while let Ok(Some(ack)) = acks.message().await {
                        let d = ack.desired_interval_seconds;
                        let d = if d.is_finite() && d > 0.0 {
                            d.min(300.0)
                        } else {
                            0.0
                        };
                        pace.store(d.to_bits(), Ordering::Relaxed);
                        counters
                            .max_pace_ms
                            .fetch_max((d * 1000.0) as u64, Ordering::Relaxed);
                        // An ack stands for every report up to its sequence (sparse acks);
                        // reports count where they were sent (in the window or not).
                        let covered = {
                            let mut sent = sent_at.lock().await;
                            let rest = sent.split_off(&ack.sequence.saturating_add(1));
                            std::mem::replace(&mut *sent, rest)
                        };
                        let earlier = covered
                            .range(..ack.sequence)
                            .filter(|(_, (_, measured))| *measured)
                            .count() as u64;
                        counters.accepted.fetch_add(earlier, Ordering::Relaxed);
                        let Some(&(t0, true)) = covered.get(&ack.sequence) else {
                            continue;
                        };
                        counters.acks.fetch_add(1, Ordering::Relaxed);
                        if ack.accepted {
                            counters.accepted.fetch_add(1, Ordering::Relaxed);
                        } else {
                            counters.rejected.fetch_add(1, Ordering::Relaxed);
                        }
                        let d = t0.elapsed();
                        if d > Duration::from_secs(1) {
                            counters.delayed.fetch_add(1, Ordering::Relaxed);
                        }
                        lat.lock().await.push(d.as_secs_f64());
                    }
                });
            }
            tokio::time::sleep(offset).await;
            let mut seq = 0u64;
            let mut next = tokio::time::Instant::now();
            // While paced: the last send and the interval it stated.
            let mut last: Option<(tokio::time::Instant, Duration)> = None;
            loop {
                tokio::time::sleep_until(next).await;
                let scheduled = next;
                let paced = f64::from_bits(pace.load(Ordering::Relaxed));
                let every = if follow_pace && paced > interval.as_secs_f64() {
                    Duration::from_secs_f64(paced)
                } else {
                    interval
                };
                // As the agent does: each tick (its sample), a paced agent sends only once its
                // node's grid point within the last promise has come.
                if let Some((at, stated)) = last.filter(|_| every > interval) {
                    let due = at + pace::next_send_delay(at - origin, stated, every, grid_phase);
                    let now = tokio::time::Instant::now();
                    if due > now {
                        next = due.min(now + interval);
                        continue;
                    }
                }
                // Missed ticks are skipped, not sent in a burst.
                next = (next + interval).max(tokio::time::Instant::now());
                last = (every > interval).then(|| (tokio::time::Instant::now(), every));
                seq += 1;
                let phase = (seq as f64 / 30.0 + i as f64).sin() * 0.1;
                let load = SyntheticLoad {
                    cpu: (0.3 + (i % 7) as f64 * 0.05 + phase).clamp(0.0, 1.0),
                    ..Default::default()
                };
                let mut r = simagent::report(&node, &instance, seq, &cap, load);
                r.ack_interval_seconds = ack_interval;
                if every > interval {
                    r.report_interval_seconds = every.as_secs_f64();
                }
                let measured = measuring.load(Ordering::Relaxed);
                if measured {
                    if scheduled.elapsed() > Duration::from_millis(100) {
                        counters.late_sends.fetch_add(1, Ordering::Relaxed);
                    }
                    counters.sent.fetch_add(1, Ordering::Relaxed);
                }
                sent_at.lock().await.insert(seq, (Instant::now(), measured));
                if tx.send(r).await.is_err() {
                    return;
                }
            }
        });
    }
    // Visibility lag: receive time of the WatchNodes update minus the report's sample time.
    let lags = Arc::new(Mutex::new(Vec::<f64>::new()));
    {
        let names: Vec<String> = (0..args.probe_nodes.min(args.agents))
            .map(|i| {
                format!(
                    "{}-{:05}",
                    args.prefix,
                    i * args.agents / args.probe_nodes.max(1)
                )
            })
            .collect();
        let mut client = ScorerClient::new(endpoint.connect().await?);
        let mut watch = client
            .watch_nodes(pb::WatchNodesRequest { node_names: names })
            .await?
            .into_inner();
        let lags = lags.clone();
        let measuring = measuring.clone();
        tokio::spawn(async move {
            while let Ok(Some(ev)) = watch.message().await {
                if ev.kind != pb::node_event::Kind::Updated as i32
                    || !measuring.load(Ordering::Relaxed)
                {
                    continue;
                }
                if let Some(r) = ev.node.and_then(|n| n.last_report) {
                    let lag = (now_nanos() - r.sample_time_unix_nanos) as f64 / 1e9;
                    lags.lock().await.push(lag);
                }
            }
        });
    }
    tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
    let cpu0 = args.scorer_pid.and_then(cpu_ticks);
    let t0 = Instant::now();
    measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs_f64(args.duration)).await;
    measuring.store(false, Ordering::Relaxed);
    let wall = t0.elapsed().as_secs_f64();
    let cpu1 = args.scorer_pid.and_then(cpu_ticks);
    // The reports of the window's last seconds are acked with the first report an ack
    // interval after the last ack: up to an ack interval and a report interval later.
    if args.ack_interval > 0.0 {
        let paced = counters.max_pace_ms.load(Ordering::Relaxed) as f64 / 1000.0;
        let report_every = args
            .interval
            .max(if args.follow_pace { paced } else { 0.0 });
        let wait = args.ack_interval.min(300.0) + report_every.min(300.0) + 2.0;
        tokio::time::sleep(Duration::from_secs_f64(wait)).await;
    }
    let mut l = ack_latencies.lock().await.clone();
    l.sort_by(f64::total_cmp);
    let mut v = lags.lock().await.clone();
    v.sort_by(f64::total_cmp);
    let c = &counters;
    println!("agents                 {}", args.agents);
    println!(
        "connections            {}",
        simagent::connections_for(args.agents, args.connections)
    );
    println!("interval_seconds       {}", args.interval);
    println!("measured_seconds       {wall:.1}");
    println!("reports_sent           {}", c.sent.load(Ordering::Relaxed));
    println!(
        "reports_per_second     {:.0}",
        c.sent.load(Ordering::Relaxed) as f64 / wall
    );
    println!("acks_received          {}", c.acks.load(Ordering::Relaxed));
    println!(
        "acks_accepted          {}",
        c.accepted.load(Ordering::Relaxed)
    );
    println!(
        "acks_rejected          {}",
        c.rejected.load(Ordering::Relaxed)
    );
    println!(
        "acks_delayed_over_1s   {}",
        c.delayed.load(Ordering::Relaxed)
    );
    println!(
        "late_sends_over_100ms  {}",
        c.late_sends.load(Ordering::Relaxed)
    );
    println!(
        "max_paced_interval_s   {:.1}",
        c.max_pace_ms.load(Ordering::Relaxed) as f64 / 1000.0
    );
    println!("ack_latency_p50_ms     {:.2}", percentile(&l, 0.5) * 1e3);
    println!("ack_latency_p99_ms     {:.2}", percentile(&l, 0.99) * 1e3);
    println!("visibility_samples     {}", v.len());
    println!("visibility_lag_p50_ms  {:.2}", percentile(&v, 0.5) * 1e3);
    println!("visibility_lag_p99_ms  {:.2}", percentile(&v, 0.99) * 1e3);
    println!(
        "visibility_lag_max_ms  {:.2}",
        v.last().copied().unwrap_or(f64::NAN) * 1e3
    );
    if let (Some(a), Some(b)) = (cpu0, cpu1) {
        let cores = (b - a) as f64 / loadstar_common::procstat::USER_HZ / wall;
        println!("scorer_cpu_cores       {cores:.3}");
    }
    Ok(())
}
