//! Fault-scenario helpers shared by `e2e_faults` and `e2e_soak`: simulated agents running
//! the agent's own reporter ([`Herd`]), reading the scorer's `/metrics` and `ListNodes`,
//! and a process's CPU peak.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};

use super::{Scorer, load, rand_u32};

/// A counter or gauge from the scorer's `/metrics` (summed over label sets matching
/// `labels`, e.g. `result="bound"`); `None` when the scorer does not answer.
pub async fn metric(scorer: &Scorer, name: &str, labels: &str) -> Option<f64> {
    let text = http_get(&format!("http://{}/metrics", scorer.http))
        .await
        .ok()?;
    let mut sum = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) || !rest.contains(labels) {
            continue;
        }
        let v: f64 = rest.rsplit(' ').next()?.parse().ok()?;
        *sum.get_or_insert(0.0) += v;
    }
    sum
}

/// A plain HTTP GET on loopback (no TLS): the body.
pub async fn http_get(url: &str) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").context("http only")?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut s = tokio::net::TcpStream::connect(host).await?;
    s.write_all(format!("GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .await?;
    let mut body = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut body)).await??;
    Ok(body
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default())
}

/// Simulated agents driven by the real agent's reporting code (`loadstar_agent::report`:
/// one stream per node, reconnecting with its capped exponential backoff and jitter), each
/// publishing a synthetic report every second, as the agent's sampler would.
pub struct Herd {
    metrics: loadstar_agent::metrics::AgentMetrics,
    _publisher: tokio::task::JoinHandle<()>,
    reporters: Vec<tokio::task::JoinHandle<()>>,
}

impl Herd {
    /// One reporter per node in `nodes`, streaming to every one of `targets` (`http://…`).
    pub fn start(targets: &[String], nodes: &[String]) -> Result<Herd> {
        use loadstar_agent::report::{self, ReportConfig, SystemResolver};
        use loadstar_testkit::agent as simagent;
        let metrics = loadstar_agent::metrics::AgentMetrics::new();
        let mut senders = Vec::new();
        let mut reporters = Vec::new();
        for node in nodes {
            let (tx, rx) = tokio::sync::watch::channel(None);
            let config = ReportConfig {
                scorers: targets.to_vec(),
                ..ReportConfig::default()
            };
            reporters.push(report::spawn(
                config,
                rx,
                std::sync::Arc::new(SystemResolver),
                metrics.clone(),
            )?);
            senders.push((node.clone(), format!("herd-{node}-{:x}", rand_u32()), tx));
        }
        let publisher = tokio::spawn(async move {
            let capacity = simagent::capacity(8, 32);
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            for seq in 1u64.. {
                tick.tick().await;
                for (node, instance, tx) in &senders {
                    let r = simagent::report(node, instance, seq, &capacity, load(0.3, 0.4));
                    tx.send_replace(Some(std::sync::Arc::new(r)));
                }
            }
        });
        Ok(Herd {
            metrics,
            _publisher: publisher,
            reporters,
        })
    }
}

impl Herd {
    /// Failed connections or streams so far, over every agent of the herd.
    pub fn errors(&self) -> f64 {
        let name = format!("{}_total", loadstar_agent::metrics::REPORT_ERRORS);
        self.metrics
            .encode()
            .lines()
            .filter(|l| l.starts_with(&name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

impl Drop for Herd {
    fn drop(&mut self) {
        self._publisher.abort();
        for r in &self.reporters {
            r.abort();
        }
    }
}

/// Which of `nodes` the scorer lists as fresh (reported within its stale threshold).
pub async fn fresh_nodes(
    scorer: &Scorer,
    nodes: &std::collections::BTreeSet<String>,
) -> Result<std::collections::BTreeSet<String>> {
    let c = loadstar_proto::pb::scorer_client::ScorerClient::connect(scorer.endpoint()).await?;
    Ok(loadstar_testkit::client::all_nodes(c)
        .await?
        .into_iter()
        .filter(|n| !n.stale && n.last_report.is_some() && nodes.contains(&n.node_name))
        .map(|n| n.node_name)
        .collect())
}

/// CPU seconds (user + system) process `pid` has used, from `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    loadstar_common::procstat::cpu_seconds(
        &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
    )
}

/// Samples a process's CPU every 250 ms; [`CpuPeak::peak`] is the highest 1 s average in
/// cores.
pub struct CpuPeak {
    task: tokio::task::JoinHandle<()>,
    peak: std::sync::Arc<std::sync::Mutex<f64>>,
}

impl CpuPeak {
    pub fn watch(pid: u32) -> CpuPeak {
        let peak = std::sync::Arc::new(std::sync::Mutex::new(0.0_f64));
        let p = peak.clone();
        let task = tokio::spawn(async move {
            let mut samples: std::collections::VecDeque<(Instant, f64)> = Default::default();
            loop {
                if let Some(cpu) = cpu_seconds(pid) {
                    let now = Instant::now();
                    samples.push_back((now, cpu));
                    while samples.len() > 1 && now - samples[0].0 > Duration::from_millis(1100) {
                        samples.pop_front();
                    }
                    let (t0, c0) = samples[0];
                    let dt = (now - t0).as_secs_f64();
                    if dt >= 0.9 {
                        let cores = (cpu - c0) / dt;
                        let mut g = p.lock().expect("peak");
                        *g = f64::max(*g, cores);
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        CpuPeak { task, peak }
    }

    pub fn peak(&self) -> f64 {
        *self.peak.lock().expect("peak")
    }
}

impl Drop for CpuPeak {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Polls until every node in `nodes` is fresh; the time each one first turned fresh
/// (relative to `since`), sorted, or an error naming how many never did.
pub async fn until_all_fresh(
    scorer: &Scorer,
    nodes: &std::collections::BTreeSet<String>,
    since: Instant,
    limit: Duration,
) -> Result<Vec<f64>> {
    let mut first: BTreeMap<String, f64> = BTreeMap::new();
    while first.len() < nodes.len() {
        ensure!(
            since.elapsed() < limit,
            "{} of {} nodes still not fresh after {limit:?}",
            nodes.len() - first.len(),
            nodes.len()
        );
        if let Ok(fresh) = fresh_nodes(scorer, nodes).await {
            let at = since.elapsed().as_secs_f64();
            for n in fresh {
                first.entry(n).or_insert(at);
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut times: Vec<f64> = first.into_values().collect();
    times.sort_by(f64::total_cmp);
    Ok(times)
}

/// `p`-quantile of sorted `v`.
pub fn quantile(v: &[f64], p: f64) -> f64 {
    v[((v.len() - 1) as f64 * p).round() as usize]
}
