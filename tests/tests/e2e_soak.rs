//! The soak (issue #17): two scorer replicas under leader election on the e2e control plane,
//! pods created and deleted continuously, simulated agents (the agent's own reporter) leaving
//! and joining, and the leader SIGKILLed (then replaced) every few minutes, for an hour by
//! default. Every 30 s it records each replica's RSS, OS threads and open file descriptors,
//! and the pods created, bound and lost, as CSV (`LOADSTAR_SOAK_CSV`, default
//! `$LOADSTAR_E2E_LOGS/soak.csv`); every window it prints the scheduling latency p50/p99
//! from the replicas' `loadstar_scorer_scheduling_latency_seconds` histograms.
//!
//! A long benchmark, not part of CI: `bash bench/soak.sh [MINUTES]` runs it (and plots the
//! CSV). It fails only on lost or doubly bound pods; the memory and latency figures are
//! printed for the record. Environment (defaults): `LOADSTAR_SOAK_MINUTES` (60),
//! `LOADSTAR_SOAK_NODES` (50), `LOADSTAR_SOAK_RATE` (pods per second, 5),
//! `LOADSTAR_SOAK_LIFETIME` (seconds a pod lives, 60), `LOADSTAR_SOAK_FAILOVER` (minutes
//! between leader kills, 10), `LOADSTAR_SOAK_WINDOW` (minutes per latency window, 10).
mod e2e_support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use e2e_support::faults::*;
use e2e_support::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DeleteParams;

const SCHEDULER: &str = "loadstar";
const LATENCY: &str = "loadstar_scorer_scheduling_latency_seconds_bucket";

fn knob(var: &str, default: f64) -> f64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `/proc/<pid>/status` `VmRSS` (MiB) and `Threads`, and the open descriptors.
fn process_figures(pid: u32) -> Option<(f64, u64, usize)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    Some((field("VmRSS:")? as f64 / 1024.0, field("Threads:")?, fds))
}

/// The cumulative latency buckets `(le, count)` of a scorer, from its `/metrics`.
async fn latency_buckets(scorer: &Scorer) -> Option<Vec<(f64, f64)>> {
    let text = http_get(&format!("http://{}/metrics", scorer.http))
        .await
        .ok()?;
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.starts_with(LATENCY)) {
        let le = line.split("le=\"").nth(1)?.split('"').next()?;
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().ok()?
        };
        out.push((le, line.rsplit(' ').next()?.parse().ok()?));
    }
    Some(out)
}

/// The upper bound of the bucket holding quantile `q` of the counts `delta` (cumulative).
fn bucket_quantile(delta: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = delta.last()?.1;
    if total <= 0.0 {
        return None;
    }
    delta
        .iter()
        .find(|(_, c)| *c >= q * total)
        .map(|(le, _)| *le)
}

/// A bucket bound for printing (`-` when the window had no binding).
fn show(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v}"))
}

/// The Lease's holder now (empty when unknown or unreadable).
async fn holder(leases: &Api<Lease>, lease: &str) -> String {
    leases
        .get_opt(lease)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .unwrap_or_default()
}

/// One scorer replica slot: its name, port and the process now running in it (whose
/// identity is the slot's name and a generation: a replacement is a new pod, as a
/// Deployment's would be, so the standby must take the Lease over).
struct Replica {
    slot: &'static str,
    identity: String,
    listen: SocketAddr,
    scorer: Scorer,
    started: Instant,
    /// Latency buckets at the window's start (or at the process's start) and the latest.
    window_start: Vec<(f64, f64)>,
    latest: Vec<(f64, f64)>,
    /// RSS (MiB) two minutes after start, for the growth over the process's life.
    rss_settled: Option<f64>,
}

async fn start_replica(
    env: &E2eEnv,
    slot: &'static str,
    generation: usize,
    lease: &str,
    listen: SocketAddr,
) -> Result<Replica> {
    let identity = format!("{slot}-{generation}");
    let scorer = Scorer::start_at(
        env,
        &env.scorer_kubeconfig,
        &identity,
        lease,
        Some(listen),
        &[
            "--insecure-allow-unauthenticated",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
        ],
    )
    .await?;
    Ok(Replica {
        slot,
        identity,
        listen,
        scorer,
        started: Instant::now(),
        window_start: Vec::new(),
        latest: Vec::new(),
        rss_settled: None,
    })
}

/// Adds the latency counts since the window start of `r` to `acc`.
fn add_window(acc: &mut BTreeMap<u64, (f64, f64)>, r: &Replica) {
    for (i, (le, c)) in r.latest.iter().enumerate() {
        let before = r.window_start.get(i).map_or(0.0, |b| b.1);
        let e = acc.entry(le.to_bits()).or_insert((*le, 0.0));
        e.1 += (c - before).max(0.0);
    }
}

#[tokio::test]
#[ignore = "a long benchmark: run bench/soak.sh"]
async fn soak_with_pod_churn_agent_churn_and_failovers() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let minutes = knob("LOADSTAR_SOAK_MINUTES", 60.0);
    let node_count = knob("LOADSTAR_SOAK_NODES", 50.0) as usize;
    let rate = knob("LOADSTAR_SOAK_RATE", 5.0) as usize;
    let lifetime = Duration::from_secs_f64(knob("LOADSTAR_SOAK_LIFETIME", 60.0));
    let failover = Duration::from_secs_f64(knob("LOADSTAR_SOAK_FAILOVER", 10.0) * 60.0);
    let window = Duration::from_secs_f64(knob("LOADSTAR_SOAK_WINDOW", 10.0) * 60.0);
    let csv_path = std::env::var("LOADSTAR_SOAK_CSV")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| env.logs.join("soak.csv"));
    let client = env.admin().await?;
    let ns = namespace(&client, "soak").await?;
    let nodes: Vec<String> = (0..node_count).map(|i| format!("{ns}-n{i}")).collect();
    for n in &nodes {
        create_node(&client, n, "16", "64Gi").await?;
    }
    let lease = format!("lease-soak-{:x}", rand_u32());
    let mut replicas = Vec::new();
    for identity in ["soak-a", "soak-b"] {
        let listen: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        replicas.push(start_replica(&env, identity, 0, &lease, listen).await?);
    }
    let targets: Vec<String> = replicas
        .iter()
        .map(|r| format!("http://{}", r.listen))
        .collect();
    // Agents in groups of 10; one group at a time leaves, and rejoins a period later.
    let groups: Vec<Vec<String>> = nodes.chunks(10).map(<[String]>::to_vec).collect();
    let mut herds: Vec<Option<Herd>> = groups
        .iter()
        .map(|g| Herd::start(&targets, g).map(Some))
        .collect::<Result<_>>()?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "loadstar");
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut csv = std::fs::File::create(&csv_path)?;
    writeln!(
        csv,
        "elapsed_s,slot,identity,pid,rss_mib,threads,fds,leader,pods_created,pods_bound,pods_lost"
    )?;

    let begin = Instant::now();
    let deadline = begin + Duration::from_secs_f64(minutes * 60.0);
    let mut created: HashMap<String, Instant> = HashMap::new();
    let mut bound: HashSet<String> = HashSet::new();
    let mut lost: Vec<String> = Vec::new();
    let (mut next_pod, mut failovers, mut churns) = (0usize, 0usize, 0usize);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let (mut last_sample, mut last_sweep, mut last_failover, mut last_churn, mut window_began) =
        (begin, begin, begin, begin, begin);
    let mut windows: Vec<String> = Vec::new();
    while Instant::now() < deadline {
        tick.tick().await;
        let now = Instant::now();
        // Pods: `rate` new ones a second.
        let batch: Vec<serde_json::Value> = (0..rate)
            .map(|i| {
                pod(
                    &format!("p{}", next_pod + i),
                    Some(SCHEDULER),
                    "100m",
                    "64Mi",
                )
            })
            .collect();
        if create_pods(&client, &ns, batch).await.is_ok() {
            for i in 0..rate {
                created.insert(format!("p{}", next_pod + i), now);
            }
        }
        next_pod += rate;
        // Every 5 s: note bound pods; delete those past their lifetime (unbound = lost).
        if now - last_sweep >= Duration::from_secs(5) {
            last_sweep = now;
            if let Ok(list) = pods(&client, &ns).await {
                for p in &list {
                    if node_of(p).is_some() {
                        bound.insert(name_of(p));
                    }
                }
            }
            let expired: Vec<String> = created
                .iter()
                .filter(|(_, at)| now - **at > lifetime)
                .map(|(n, _)| n.clone())
                .collect();
            for name in expired {
                created.remove(&name);
                if !bound.contains(&name) {
                    lost.push(name.clone());
                }
                let _ = pods_api
                    .delete(
                        &name,
                        &DeleteParams {
                            grace_period_seconds: Some(0),
                            ..DeleteParams::default()
                        },
                    )
                    .await;
            }
        }
        // Agents leave and join.
        if now - last_churn >= Duration::from_secs(60) {
            last_churn = now;
            let g = churns % groups.len();
            herds[g] = match herds[g].take() {
                Some(_) => None,
                None => Some(Herd::start(&targets, &groups[g])?),
            };
            churns += 1;
        }
        // The leader dies; a replacement takes its slot.
        if now - last_failover >= failover {
            last_failover = now;
            let holder = holder(&leases, &lease).await;
            if let Some(i) = replicas.iter().position(|r| r.identity == holder) {
                let (slot, listen) = (replicas[i].slot, replicas[i].listen);
                // Its latency counts up to the kill, not only to the last sample.
                if let Some(b) = latency_buckets(&replicas[i].scorer).await {
                    replicas[i].latest = b;
                }
                replicas[i].scorer.kill();
                failovers += 1;
                let mut fresh = start_replica(&env, slot, failovers, &lease, listen).await?;
                // Counts since the window began die with the process: keep what was seen.
                let mut acc = BTreeMap::new();
                add_window(&mut acc, &replicas[i]);
                fresh.window_start = acc.values().map(|(le, c)| (*le, -c)).collect();
                replicas[i] = fresh;
            }
        }
        // Samples every 30 s, latency windows.
        if now - last_sample >= Duration::from_secs(30) {
            last_sample = now;
            let holder = holder(&leases, &lease).await;
            for r in replicas.iter_mut() {
                if let Some(b) = latency_buckets(&r.scorer).await {
                    r.latest = b;
                }
                let pid = r.scorer.pid().unwrap_or(0);
                let Some((rss, threads, fds)) = process_figures(pid) else {
                    continue;
                };
                if r.rss_settled.is_none() && r.started.elapsed() >= Duration::from_secs(120) {
                    r.rss_settled = Some(rss);
                }
                writeln!(
                    csv,
                    "{:.0},{},{},{pid},{rss:.1},{threads},{fds},{},{},{},{}",
                    (now - begin).as_secs_f64(),
                    r.slot,
                    r.identity,
                    r.identity == holder,
                    next_pod,
                    bound.len(),
                    lost.len()
                )?;
            }
            csv.flush()?;
            if now - window_began >= window {
                let mut acc = BTreeMap::new();
                for r in &replicas {
                    add_window(&mut acc, r);
                }
                let delta: Vec<(f64, f64)> = acc.into_values().collect();
                let count = delta.last().map_or(0.0, |d| d.1);
                let line = format!(
                    "minutes {:.0}–{:.0}: {count:.0} bindings, latency p50 ≤ {} s, p99 ≤ {} s",
                    (window_began - begin).as_secs_f64() / 60.0,
                    (now - begin).as_secs_f64() / 60.0,
                    show(bucket_quantile(&delta, 0.5)),
                    show(bucket_quantile(&delta, 0.99)),
                );
                eprintln!("[soak] {line}");
                windows.push(line);
                for r in replicas.iter_mut() {
                    r.window_start = r.latest.clone();
                }
                window_began = now;
            }
        }
    }
    // The end: every pod still there is bound, once, where its Event says.
    let remaining = pods(&client, &ns).await?.len();
    wait_bound(&client, &ns, remaining, Duration::from_secs(120))
        .await
        .with_context(|| replicas[0].scorer.log_tail())?;
    let mut twice = Vec::new();
    let placed: BTreeMap<String, String> = pods(&client, &ns)
        .await?
        .iter()
        .filter_map(|p| node_of(p).map(|n| (name_of(p), n)))
        .collect();
    let mut events_per_pod: HashMap<String, Vec<String>> = HashMap::new();
    for e in events(&client, &ns).await? {
        if e.reason.as_deref() == Some("Scheduled") {
            let node = e
                .message
                .unwrap_or_default()
                .rsplit(" to ")
                .next()
                .unwrap_or_default()
                .to_string();
            let pod = e.involved_object.name.unwrap_or_default();
            for _ in 0..e.count.unwrap_or(1).max(1) {
                events_per_pod
                    .entry(pod.clone())
                    .or_default()
                    .push(node.clone());
            }
        }
    }
    for (pod, nodes) in &events_per_pod {
        if nodes.len() > 1 || placed.get(pod).is_some_and(|n| n != &nodes[0]) {
            twice.push(format!("{pod}: {nodes:?} (on {:?})", placed.get(pod)));
        }
    }
    for r in &replicas {
        let pid = r.scorer.pid().unwrap_or(0);
        if let (Some(settled), Some((rss, threads, fds))) = (r.rss_settled, process_figures(pid)) {
            eprintln!(
                "[soak] {} ({}, pid {pid}, up {:.0} min): RSS {settled:.1} MiB at 2 min, {rss:.1} MiB \
                 at the end ({:+.1} %), {threads} threads, {fds} fds",
                r.slot,
                r.identity,
                r.started.elapsed().as_secs_f64() / 60.0,
                (rss / settled - 1.0) * 100.0,
            );
        }
    }
    eprintln!(
        "[soak] {minutes:.0} min, {node_count} nodes, {rate} pods/s living {:.0} s: {next_pod} \
         pods created, {} seen bound, {} lost, {} bound twice or elsewhere than their Event; \
         {failovers} leader kills, {churns} agent-group churns; CSV {}",
        lifetime.as_secs_f64(),
        bound.len(),
        lost.len(),
        twice.len(),
        csv_path.display(),
    );
    ensure!(
        lost.is_empty(),
        "pods never bound in their lifetime: {:?}",
        &lost[..lost.len().min(10)]
    );
    ensure!(
        twice.is_empty(),
        "bound twice: {:?}",
        &twice[..twice.len().min(10)]
    );
    delete_pods_now(&client, &ns).await;
    delete_nodes(&client, &nodes).await;
    Ok(())
}
