//! `scheduler-bench auth-load`: what authentication costs other callers. Measures gRPC
//! health and `Score` latency on an authenticating scorer alone, then again while `streams`
//! idle authenticated agent streams stay open and `logins_per_second` logins with bad tokens
//! arrive, each needing (or being refused) a TokenReview; prints both, their ratio, and the
//! scorer's CPU and memory. The agent pod, ServiceAccounts and tokens come from the real API
//! server (TokenRequest).
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, ServiceAccount};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use loadstar_proto::pb;
use loadstar_proto::pb::ingest_client::IngestClient;
use loadstar_proto::pb::scorer_client::ScorerClient;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

use crate::{cpu_seconds, percentile};

/// What to apply.
pub struct Load {
    /// Idle authenticated agent streams held open.
    pub streams: usize,
    /// Logins with bad tokens per second.
    pub logins_per_second: u32,
    /// How long each phase measures.
    pub phase: Duration,
    /// The scorer's pid.
    pub pid: u32,
}

const NS: &str = "loadstar";
const NODE: &str = "auth-load-node";

async fn create_ok<K>(api: &Api<K>, value: serde_json::Value) -> Result<()>
where
    K: kube::Resource
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + k8s_openapi::serde::Serialize
        + std::fmt::Debug,
{
    match api
        .create(&PostParams::default(), &serde_json::from_value(value)?)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn token(
    c: &Client,
    sa: &str,
    audiences: &[&str],
    pod: Option<(&str, &str)>,
) -> Result<String> {
    loadstar_tests::token_request(c, NS, sa, audiences, pod, 3600).await
}

/// The agent's and a client's tokens: a Running agent pod on a node, as the DaemonSet makes.
async fn set_up(c: &Client) -> Result<(String, String)> {
    create_ok(
        &Api::<Namespace>::all(c.clone()),
        json!({"metadata": {"name": NS}}),
    )
    .await?;
    let sas: Api<ServiceAccount> = Api::namespaced(c.clone(), NS);
    create_ok(&sas, json!({"metadata": {"name": "loadstar-agent"}})).await?;
    create_ok(&sas, json!({"metadata": {"name": "bench-client"}})).await?;
    create_ok(
        &Api::<Node>::all(c.clone()),
        json!({"metadata": {"name": NODE},
               "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                          "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                          "conditions": [{"type": "Ready", "status": "True"}]}}),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(c.clone(), NS);
    create_ok(
        &pods,
        json!({"metadata": {"name": "agent-bench"},
               "spec": {"serviceAccountName": "loadstar-agent", "nodeName": NODE,
                        "automountServiceAccountToken": false,
                        "containers": [{"name": "agent", "image": "registry.invalid/agent"}]}}),
    )
    .await?;
    pods.patch_status(
        "agent-bench",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await?;
    let uid = pods
        .get("agent-bench")
        .await?
        .metadata
        .uid
        .context("pod uid")?;
    let agent = token(
        c,
        "loadstar-agent",
        &["loadstar"],
        Some(("agent-bench", &uid)),
    )
    .await?;
    let client = token(c, "bench-client", &[], None).await?;
    Ok((agent, client))
}

fn with_token<T>(msg: T, token: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    if let Ok(v) = format!("Bearer {token}").parse() {
        r.metadata_mut().insert("authorization", v);
    }
    r
}

async fn connect(scorer: &str) -> Result<Channel> {
    Ok(Endpoint::from_shared(scorer.to_string())?.connect().await?)
}

fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// p50/p99 (ms) of health and Score calls, one at a time each, for `phase`; the scorer's
/// CPU (cores) and RSS (MiB).
async fn measure(
    scorer: &str,
    client_token: &str,
    phase: Duration,
    pid: u32,
) -> Result<serde_json::Value> {
    let cpu0 = cpu_seconds(pid).unwrap_or(0.0);
    let end = Instant::now() + phase;
    let mut health = HealthClient::new(connect(scorer).await?);
    let mut score = ScorerClient::new(connect(scorer).await?);
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "bench", "namespace": "default"},
                     "spec": {"containers": [{"name": "c", "resources":
                              {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}})
    .to_string();
    let token = client_token.to_string();
    let health_task = tokio::spawn(async move {
        let mut ms = Vec::new();
        while Instant::now() < end {
            let t = Instant::now();
            let ok = health.check(HealthCheckRequest::default()).await.is_ok();
            if ok {
                ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        ms
    });
    let score_task = tokio::spawn(async move {
        let (mut ms, mut errors) = (Vec::new(), 0u64);
        while Instant::now() < end {
            let req = with_token(
                pb::ScoreRequest {
                    pod: Some(pb::score_request::Pod::PodJson(pod.clone())),
                    ..pb::ScoreRequest::default()
                },
                &token,
            );
            let t = Instant::now();
            match score.score(req).await {
                Ok(_) => ms.push(t.elapsed().as_secs_f64() * 1e3),
                Err(_) => errors += 1,
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        (ms, errors)
    });
    let mut h = health_task.await?;
    let (mut s, score_errors) = score_task.await?;
    h.sort_by(f64::total_cmp);
    s.sort_by(f64::total_cmp);
    let cores = (cpu_seconds(pid).unwrap_or(0.0) - cpu0) / phase.as_secs_f64();
    Ok(json!({
        "health_calls": h.len(), "health_p50_ms": percentile(&h, 0.5), "health_p99_ms": percentile(&h, 0.99),
        "score_calls": s.len(), "score_errors": score_errors,
        "score_p50_ms": percentile(&s, 0.5), "score_p99_ms": percentile(&s, 0.99),
        "scorer_cores": cores, "scorer_rss_mib": rss_mib(pid),
    }))
}

/// Holds `n` idle agent streams open (authenticated, no report sent).
async fn idle_streams(
    scorer: &str,
    token: &str,
    n: usize,
) -> Result<
    Vec<(
        mpsc::Sender<pb::NodeReport>,
        tonic::Streaming<pb::ReportAck>,
    )>,
> {
    // ≤ 90 streams per connection (the port allows 100 concurrent calls per connection).
    let mut channels = Vec::new();
    for _ in 0..n.div_ceil(90) {
        channels.push(connect(scorer).await?);
    }
    let opened: Vec<_> = futures::stream::iter(0..n)
        .map(|i| {
            let channel = channels[i / 90].clone();
            let token = token.to_string();
            async move {
                let (tx, rx) = mpsc::channel(1);
                let acks = IngestClient::new(channel)
                    .report(with_token(ReceiverStream::new(rx), &token))
                    .await?
                    .into_inner();
                Ok::<_, tonic::Status>((tx, acks))
            }
        })
        .buffer_unordered(256)
        .collect()
        .await;
    let mut held = Vec::new();
    let mut failures: std::collections::BTreeMap<String, usize> = Default::default();
    for r in opened {
        match r {
            Ok(s) => held.push(s),
            Err(s) => {
                *failures
                    .entry(format!("{:?}: {}", s.code(), s.message()))
                    .or_default() += 1
            }
        }
    }
    if !failures.is_empty() {
        anyhow::bail!(
            "opening {n} idle authenticated streams: {} opened; failures: {failures:?}",
            held.len()
        );
    }
    Ok(held)
}

/// Outcomes of the failed logins.
#[derive(Default)]
struct Storm {
    sent: AtomicU64,
    unauthenticated: AtomicU64,
    busy: AtomicU64,
    other: AtomicU64,
}

async fn storm(
    scorer: String,
    per_second: u32,
    stop: Arc<AtomicBool>,
    out: Arc<Storm>,
) -> Result<()> {
    let mut channels = Vec::new();
    for _ in 0..8 {
        channels.push(connect(&scorer).await?);
    }
    let mut tick =
        tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(per_second.max(1))));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        n += 1;
        let channel = channels[(n % 8) as usize].clone();
        let out = out.clone();
        out.sent.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let (_tx, rx) = mpsc::channel::<pb::NodeReport>(1);
            let r = IngestClient::new(channel)
                .report(with_token(
                    ReceiverStream::new(rx),
                    &format!("bad-token-{n}"),
                ))
                .await;
            let counter = match r.map_err(|s| s.code()) {
                Err(tonic::Code::Unauthenticated) => &out.unauthenticated,
                Err(tonic::Code::Unavailable) => &out.busy,
                _ => &out.other,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        });
    }
    Ok(())
}

/// Runs `work` on a thread and current-thread runtime of its own, so other load in this
/// process (the storm's thousand tasks a second) does not delay it.
fn own_thread<T: Send + 'static>(
    work: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> std::thread::JoinHandle<Result<T>> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(work)
    })
}

/// [`measure`] on its own thread.
fn measure_alone(
    scorer: &str,
    token: &str,
    phase: Duration,
    pid: u32,
) -> Result<serde_json::Value> {
    let (scorer, token) = (scorer.to_string(), token.to_string());
    own_thread(async move { measure(&scorer, &token, phase, pid).await })
        .join()
        .map_err(|_| anyhow::anyhow!("the measuring thread panicked"))?
}

/// Runs both phases and prints one JSON line.
pub async fn run(c: &Client, scorer: &str, load: Load) -> Result<()> {
    let (agent_token, client_token) = set_up(c).await?;
    // The scorer must have listed the agent pod before its token can report; the first
    // Score call warms the client token's cache entry.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let alone = measure_alone(scorer, &client_token, load.phase, load.pid)?;
    let t = Instant::now();
    let held = idle_streams(scorer, &agent_token, load.streams).await?;
    let opened_in = t.elapsed().as_secs_f64();
    let stop = Arc::new(AtomicBool::new(false));
    let outcomes = Arc::new(Storm::default());
    // The storm and the measurement each get a thread and runtime of their own.
    let storm_thread = own_thread(storm(
        scorer.to_string(),
        load.logins_per_second,
        stop.clone(),
        outcomes.clone(),
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let loaded = measure_alone(scorer, &client_token, load.phase, load.pid)?;
    stop.store(true, Ordering::Relaxed);
    storm_thread
        .join()
        .map_err(|_| anyhow::anyhow!("the storm thread panicked"))??;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ratio = |k: &str| {
        let a = alone[k].as_f64().unwrap_or(0.0);
        let b = loaded[k].as_f64().unwrap_or(0.0);
        if a > 0.0 { b / a } else { 0.0 }
    };
    let secs = load.phase.as_secs_f64() + 1.0;
    println!(
        "{}",
        json!({
            "idle_streams": held.len(), "streams_opened_in_s": opened_in,
            "failed_logins_per_s_sent": outcomes.sent.load(Ordering::Relaxed) as f64 / secs,
            "failed_logins_unauthenticated": outcomes.unauthenticated.load(Ordering::Relaxed),
            "failed_logins_busy": outcomes.busy.load(Ordering::Relaxed),
            "failed_logins_other": outcomes.other.load(Ordering::Relaxed),
            "alone": alone, "loaded": loaded,
            "health_p99_ratio": ratio("health_p99_ms"), "score_p99_ratio": ratio("score_p99_ms"),
        })
    );
    drop(held);
    Ok(())
}
