//! `scheduler-bench`: the helper behind `bench/scheduler-throughput.sh`. Creates kubelet-less
//! Nodes and pre-created pending pods, streams simulated agent reports for every node to a
//! scorer, and measures how fast a scheduler binds the pods: pods/s from a start mark to all
//! bound, creation→bound and start→bound latency percentiles, and the CPU seconds the given
//! processes spent meanwhile. Also the extender's latency per call, and what authentication
//! costs under a login storm (`auth-load`, in `auth_load.rs`).
mod auth_load;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Client, Config};
use loadstar_proto::pb;
use loadstar_proto::pb::scorer_client::ScorerClient;
use loadstar_testkit::agent::{self as simagent, SyntheticLoad};
use serde_json::json;

/// Flags.
#[derive(Debug, Parser)]
#[command(name = "scheduler-bench", about)]
struct Cli {
    /// Admin kubeconfig.
    #[arg(long)]
    kubeconfig: PathBuf,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Creates `nodes` Ready nodes named `bench-node-N` (8 CPUs, 32 GiB, 110 pods).
    Nodes {
        #[arg(long, default_value_t = 1000)]
        count: usize,
    },
    /// Creates `count` pending pods for `scheduler` in `namespace`; prints the Unix time (ms)
    /// at which creation finished.
    Pods {
        #[arg(long)]
        namespace: String,
        #[arg(long)]
        scheduler: String,
        #[arg(long, default_value_t = 5000)]
        count: usize,
        /// Percent of the pods (every pod whose index mod 100 is below it) that carry a
        /// constraint: half of them a required anti-affinity against their group (one per
        /// host), the other half a hard topology spread over hosts (maxSkew 1) of their
        /// group; 50 groups.
        #[arg(long, default_value_t = 0)]
        constrained_percent: usize,
    },
    /// Streams reports for `bench-node-0..count` to the scorer until killed.
    Agents {
        #[arg(long)]
        scorer: String,
        #[arg(long, default_value_t = 1000)]
        count: usize,
        /// HTTP/2 connections the streams share.
        #[arg(long, default_value_t = 8)]
        connections: usize,
        /// Threads the load generator runs on, each with its own single-threaded runtime and
        /// its share of the connections (at least 1, at most one per connection).
        #[arg(long, default_value_t = 2)]
        threads: usize,
    },
    /// Waits (at most `timeout` seconds) until the scorer has fresh agent load for `count`
    /// nodes.
    Ready {
        #[arg(long)]
        scorer: String,
        #[arg(long, default_value_t = 1000)]
        count: usize,
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
    /// Health and Score latency of an authenticating scorer, alone and then while
    /// `streams` idle authenticated agent streams are open and `logins_per_second` failed
    /// logins arrive; creates the agent pod and tokens it needs. Prints one JSON line.
    AuthLoad {
        #[arg(long)]
        scorer: String,
        #[arg(long, default_value_t = 5000)]
        streams: usize,
        #[arg(long, default_value_t = 1000)]
        logins_per_second: u32,
        /// Seconds each phase measures.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// The scorer's pid (CPU and RSS).
        #[arg(long)]
        pid: u32,
    },
    /// Times `calls` extender calls of each verb (`filter`, `prioritize`) with `nodes` node
    /// names (`bench-node-0..`, `nodeCacheCapable` form) against `url` (e.g.
    /// `127.0.0.1:8888`), one keep-alive connection; prints p50/p99 per verb as JSON.
    ExtenderLatency {
        #[arg(long)]
        url: String,
        #[arg(long, default_value = "loadstar")]
        profile: String,
        #[arg(long, default_value_t = 1000)]
        nodes: usize,
        #[arg(long, default_value_t = 300)]
        calls: usize,
    },
    /// Calls `Score` (a described 100m/64Mi pod, the default profile; `--kubeconfig` unused)
    /// for `seconds` against `scorer`, `pause_ms` apart, on one connection; prints calls,
    /// errors, p50/p99/max latency and the five slowest calls (seconds into the probe,
    /// milliseconds) as JSON. No Kubernetes connection needed.
    ScoreLatency {
        #[arg(long)]
        scorer: String,
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Pause between calls, milliseconds.
        #[arg(long, default_value_t = 2)]
        pause_ms: u64,
    },
    /// The start mark of a run: deletes the Lease `namespace/name` that a waiting scheduler
    /// takes. Reads the Lease first, so this process's start, its client's set-up and its
    /// connection come before the mark; then writes the mark (Unix ms) to FILE for `wait
    /// --start-file` (whole: written beside it, then renamed), deletes the Lease and prints
    /// the mark.
    ReleaseLease {
        #[arg(long)]
        namespace: String,
        #[arg(long)]
        name: String,
        #[arg(long, value_name = "FILE")]
        start_file: PathBuf,
    },
    /// Waits until every pod of `namespace` is bound; prints the figures as JSON.
    Wait {
        #[arg(long)]
        namespace: String,
        #[arg(long)]
        count: usize,
        /// Start mark, Unix ms (default: now).
        #[arg(long, conflicts_with = "start_file")]
        start_ms: Option<u64>,
        /// Lists the namespace's pods first, polls the watch that follows for 0.2 s (its
        /// request goes out then), creates `FILE.synced`, then waits for FILE to hold the
        /// start mark (Unix ms) and counts from there: the observer's list of every pending
        /// pod and its watch request fall before the start mark, not in the scheduler's
        /// measured window.
        #[arg(long, value_name = "FILE")]
        start_file: Option<PathBuf>,
        /// Processes to account CPU for, as name=pid, or name=pid/comm for the threads of pid
        /// named comm (at most 15 bytes, the kernel's limit). A process that cannot be read
        /// at the start mark or the last bind is an error; a name no thread has at both is
        /// left out of the figures, and one whose threads' CPU fell is an error.
        #[arg(long, value_delimiter = ',')]
        pids: Vec<String>,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
}

async fn client(path: &PathBuf) -> Result<Client> {
    let kc = Kubeconfig::read_from(path)?;
    let mut cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    cfg.read_timeout = Some(Duration::from_secs(120));
    Ok(Client::try_from(cfg)?)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn node_name(i: usize) -> String {
    format!("bench-node-{i}")
}

async fn create_nodes(c: &Client, count: usize) -> Result<()> {
    let api: Api<Node> = Api::all(c.clone());
    futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = node_name(i);
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                    "status": {
                        "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                        "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}
                    }
                }))?;
                match api.create(&PostParams::default(), &node).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => return Err(e).context("creating node"),
                }
                let ts = k8s_openapi::jiff::Timestamp::now().to_string();
                let patch = json!({"status": {"conditions": [{
                    "type": "Ready", "status": "True", "reason": "SimulatedKubelet",
                    "lastHeartbeatTime": ts, "lastTransitionTime": ts}]}});
                api.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                    .await
                    .context("node status")?;
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// The spec of bench pod `i` (see `Cmd::Pods::constrained_percent`).
fn bench_pod(i: usize, scheduler: &str, constrained_percent: usize) -> serde_json::Value {
    let group = format!("g{}", i % 50);
    let mut pod = json!({
        "metadata": {"name": format!("pod-{i}"), "labels": {"app": "bench", "group": group}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "c", "image": "registry.invalid/pause:3",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]
        }
    });
    if i % 100 < constrained_percent {
        let selector = json!({"matchLabels": {"group": group}});
        if (i / 100).is_multiple_of(2) {
            pod["spec"]["affinity"] = json!({"podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": selector}]}});
        } else {
            pod["spec"]["topologySpreadConstraints"] = json!([{"maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": selector}]);
        }
    }
    pod
}

async fn create_pods(
    c: &Client,
    ns: &str,
    scheduler: &str,
    count: usize,
    constrained_percent: usize,
) -> Result<()> {
    let nsapi: Api<Namespace> = Api::all(c.clone());
    match nsapi
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e).context("creating namespace"),
    }
    let api: Api<Pod> = Api::namespaced(c.clone(), ns);
    futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let pod: Pod =
                    serde_json::from_value(bench_pod(i, scheduler, constrained_percent))?;
                api.create(&PostParams::default(), &pod)
                    .await
                    .context("creating pod")?;
                Ok::<(), anyhow::Error>(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// The load generator stands in for agents that run on other machines, so on this bench's
/// shared cores it should cost as little as it can without changing what the scorer receives.
/// Each of `threads` OS threads runs its own single-threaded runtime with its share of the
/// connections and of the agents on them: the reports leave from `threads` independent
/// senders (two by default, as from the one-worker-per-core runtime this replaced on the
/// 2-core bench host), but a tick's reports and the connection task that writes them no longer
/// wake each other across cores (cross-thread wakes and parking were ~15 % of the generator's
/// CPU by `perf`). Runs until killed; returns the first thread's error or panic.
fn agents(scorer: &str, count: usize, connections: usize, threads: usize) -> Result<()> {
    let connections = simagent::connections_for(count, connections);
    // Every thread needs a connection of its own to send on.
    let threads = threads.clamp(1, connections);
    // Set up before any thread starts, so that a bad URL or a runtime that cannot be built
    // fails the command at once rather than one thread's share of the agents.
    let endpoint = tonic::transport::Endpoint::from_shared(scorer.to_string())
        .with_context(|| format!("scorer URL {scorer:?}"))?;
    let runtimes = (0..threads)
        .map(|_| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("building the Tokio runtime")
        })
        .collect::<Result<Vec<_>>>()?;
    let (done, ended) = std::sync::mpsc::channel::<Result<()>>();
    for (thread, runtime) in runtimes.into_iter().enumerate() {
        let (endpoint, done) = (endpoint.clone(), done.clone());
        std::thread::Builder::new()
            .name(format!("agents-{thread}"))
            .spawn(move || {
                let run =
                    || runtime.block_on(agents_on(&endpoint, count, connections, threads, thread));
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
                    .unwrap_or_else(|p| {
                        let what = p
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_default();
                        Err(anyhow::anyhow!(
                            "load generator thread {thread} panicked: {what}"
                        ))
                    });
                let _ = done.send(result);
            })
            .context("starting a load generator thread")?;
    }
    drop(done);
    // The threads run until the process is killed; the first to end ends the command.
    match ended.recv() {
        Ok(result) => result,
        Err(_) => bail!("every load generator thread ended without a result"),
    }
}

/// The agents of one generator thread: the connections `thread`, `thread + threads`, … and
/// on each of them the agents `connection`, `connection + connections`, … (agent `i` always
/// shares connection `i % connections`).
async fn agents_on(
    endpoint: &tonic::transport::Endpoint,
    count: usize,
    connections: usize,
    threads: usize,
    thread: usize,
) -> Result<()> {
    let capacity = simagent::capacity(8, 32);
    let mut tasks = Vec::new();
    for c in (thread..connections).step_by(threads) {
        let channel = endpoint.connect_lazy();
        for i in (c..count).step_by(connections) {
            let channel = channel.clone();
            let capacity = capacity.clone();
            // Loads spread from 10 % to 85 % CPU so real load matters.
            let load = SyntheticLoad {
                cpu: 0.10 + 0.75 * ((i * 37) % 100) as f64 / 100.0,
                memory: 0.2 + 0.5 * ((i * 53) % 100) as f64 / 100.0,
                ..SyntheticLoad::default()
            };
            tasks.push(tokio::spawn(async move {
                let node = node_name(i);
                let (tx, acks) = simagent::open_stream(channel);
                // Spread the streams over the second.
                tokio::time::sleep(Duration::from_millis((i % 1000) as u64)).await;
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                let instance = format!("bench-{i}-{}", now_ms());
                for seq in 1.. {
                    tick.tick().await;
                    let mut report = simagent::report(&node, &instance, seq, &capacity, load);
                    // Acked as the real agent asks by default.
                    report.ack_interval_seconds =
                        loadstar_proto::limits::DEFAULT_ACK_INTERVAL_SECONDS as f64;
                    if tx.send(report).await.is_err() {
                        break;
                    }
                }
                acks.abort();
            }));
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}

async fn ready(scorer: &str, count: usize, timeout: u64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(timeout);
    let mut last = String::from("not connected");
    while Instant::now() < deadline {
        match ScorerClient::connect(scorer.to_string()).await {
            Ok(c) => match loadstar_testkit::client::all_nodes(c).await {
                Ok(nodes) => {
                    let fresh = nodes
                        .iter()
                        .filter(|n| n.last_report.is_some() && !n.stale)
                        .count();
                    if fresh >= count {
                        eprintln!("{fresh} nodes report load");
                        return Ok(());
                    }
                    last = format!("{fresh} fresh");
                }
                Err(e) => last = e.to_string(),
            },
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("the scorer never had {count} fresh nodes; last: {last}")
}

pub(crate) fn cpu_seconds(pid: u32) -> Option<f64> {
    loadstar_common::procstat::cpu_seconds(
        &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
    )
}

/// CPU seconds of `pid`'s threads named `comm`; `None` when none is running.
fn thread_cpu_seconds(pid: u32, comm: &str) -> Option<f64> {
    let mut found = None;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let path = task.path();
        if std::fs::read_to_string(path.join("comm")).is_ok_and(|c| c.trim_end() == comm)
            && let Some(s) = std::fs::read_to_string(path.join("stat"))
                .ok()
                .and_then(|st| loadstar_common::procstat::cpu_seconds(&st))
        {
            *found.get_or_insert(0.0) += s;
        }
    }
    found
}

/// What `wait --pids` accounts CPU for: a process, or its threads of one name.
#[derive(Debug, Clone, PartialEq)]
enum Account {
    Process(u32),
    Threads(u32, String),
}

impl Account {
    /// `pid` or `pid/comm`.
    fn parse(spec: &str) -> Option<Account> {
        match spec.split_once('/') {
            // The kernel keeps 15 bytes of a thread's name: a longer one never matches.
            Some((pid, comm)) if !comm.is_empty() && comm.len() <= 15 => {
                Some(Account::Threads(pid.parse().ok()?, comm.to_string()))
            }
            Some(_) => None,
            None => Some(Account::Process(spec.parse().ok()?)),
        }
    }

    fn cpu_seconds(&self) -> Option<f64> {
        match self {
            Account::Process(pid) => cpu_seconds(*pid),
            Account::Threads(pid, comm) => thread_cpu_seconds(*pid, comm),
        }
    }
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Where `wait`'s start mark comes from.
enum Start {
    /// Given: the watch is opened after it.
    Ms(u64),
    /// Written to this file once the watch is synced (`FILE.synced` says so).
    File(PathBuf),
}

/// Writes the start mark `ms` to `file` whole: beside it first, then renamed over it, so a
/// reader polling `file` never sees part of it.
fn write_start_mark(file: &std::path::Path, ms: u64) -> Result<()> {
    let mut beside = file.as_os_str().to_owned();
    beside.push(".tmp");
    std::fs::write(&beside, format!("{ms}\n"))
        .with_context(|| format!("writing {}", PathBuf::from(&beside).display()))?;
    std::fs::rename(&beside, file).with_context(|| format!("renaming onto {}", file.display()))
}

/// Reads the start mark from `file` once it holds one, polling every millisecond until
/// `deadline`.
async fn start_mark(file: &std::path::Path, deadline: Instant) -> Result<u64> {
    loop {
        if let Ok(text) = std::fs::read_to_string(file)
            && let Ok(ms) = text.trim().parse::<u64>()
        {
            return Ok(ms);
        }
        if Instant::now() >= deadline {
            bail!("no start mark in {} before the timeout", file.display());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn wait(
    c: &Client,
    ns: &str,
    count: usize,
    start: Start,
    pids: &[String],
    timeout: u64,
) -> Result<()> {
    // This process is the observer: its own CPU is reported too (it shares the host).
    let mut procs: Vec<(String, Account)> = Vec::new();
    for spec in pids
        .iter()
        .map(String::as_str)
        .chain([format!("observer={}", std::process::id()).as_str()])
    {
        let account = spec
            .split_once('=')
            .filter(|(n, _)| !n.is_empty())
            .and_then(|(n, a)| Some((n.to_string(), Account::parse(a)?)))
            .with_context(|| {
                format!(
                    "--pids wants name=pid or name=pid/comm (comm at most 15 bytes), got {spec:?}"
                )
            })?;
        if procs.iter().any(|(n, _)| *n == account.0) {
            bail!("--pids names {:?} twice", account.0);
        }
        procs.push(account);
    }
    // A process must be readable; threads of a name may be absent (then left out).
    let cpu_now = || -> Result<HashMap<String, f64>> {
        let mut now = HashMap::new();
        for (n, a) in &procs {
            match (a, a.cpu_seconds()) {
                (_, Some(s)) => {
                    now.insert(n.clone(), s);
                }
                (Account::Process(pid), None) => bail!("cannot read the CPU of {n} (pid {pid})"),
                (Account::Threads(..), None) => {}
            }
        }
        Ok(now)
    };
    let api: Api<Pod> = Api::namespaced(c.clone(), ns);
    // pod → (created Unix ms from the server, bound Unix ms as observed here).
    let mut created: HashMap<String, u64> = HashMap::new();
    let mut bound: HashMap<String, u64> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(timeout);
    let stream = watcher::watcher(api.clone(), watcher::Config::default());
    futures::pin_mut!(stream);
    let mut seen = |p: Pod, t: u64, bound: &mut HashMap<String, u64>| {
        let name = p.metadata.name.clone().unwrap_or_default();
        if let Some(ts) = &p.metadata.creation_timestamp {
            created.insert(name.clone(), ts.0.as_millisecond() as u64);
        }
        if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
            bound.entry(name).or_insert(t);
        }
    };
    let (start_ms, cpu0) = match start {
        Start::Ms(ms) => (ms, cpu_now()?),
        Start::File(file) => {
            // The first list, before the start mark: its pods are pending, or bound before
            // the start (counted at the mark).
            loop {
                let ev = tokio::time::timeout_at(deadline.into(), stream.next())
                    .await
                    .context("timed out listing the pods")?;
                match ev.context("watch ended")?? {
                    watcher::Event::InitApply(p) | watcher::Event::Apply(p) => {
                        seen(p, 0, &mut bound)
                    }
                    watcher::Event::InitDone => break,
                    _ => {}
                }
            }
            // The watch request goes out on the stream's next poll: it is polled for a moment
            // before this says it is synced, and until the mark.
            let mut synced = file.clone().into_os_string();
            synced.push(".synced");
            let settle = tokio::time::sleep(Duration::from_millis(200));
            tokio::pin!(settle);
            let mut said = false;
            let ms = loop {
                tokio::select! {
                    ev = stream.next() => match ev.context("watch ended")?? {
                        watcher::Event::InitApply(p) | watcher::Event::Apply(p) => {
                            seen(p, 0, &mut bound)
                        }
                        _ => {}
                    },
                    () = &mut settle, if !said => {
                        std::fs::write(&synced, b"").with_context(|| {
                            format!("writing {}", PathBuf::from(&synced).display())
                        })?;
                        said = true;
                    }
                    ms = start_mark(&file, deadline), if said => break ms?,
                }
            };
            let cpu0 = cpu_now()?;
            for t in bound.values_mut() {
                *t = ms;
            }
            (ms, cpu0)
        }
    };
    while bound.len() < count {
        let ev = tokio::time::timeout_at(deadline.into(), stream.next())
            .await
            .with_context(|| format!("timed out with {}/{count} bound", bound.len()))?;
        let Some(ev) = ev else { bail!("watch ended") };
        let t = now_ms();
        match ev? {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => seen(p, t, &mut bound),
            _ => {}
        }
    }
    // CPU over the same window as pods/s: from the start mark to the last pod seen bound
    // (not the Events' list below).
    let cpu1 = cpu_now()?;
    let end = bound.values().copied().max().unwrap_or(start_ms);
    // Events are written asynchronously by both schedulers: how many were there when the
    // last pod was bound (their API cost after that is outside the CPU window).
    let events: Api<Event> = Api::namespaced(c.clone(), ns);
    let scheduled_events = events
        .list(&ListParams::default().fields("reason=Scheduled"))
        .await
        .map(|l| l.items.len())
        .unwrap_or(0);
    let mut cpu: HashMap<String, f64> = HashMap::new();
    for (n, s) in &cpu1 {
        let Some(s0) = cpu0.get(n) else { continue };
        // Threads that exit take their CPU with them: a fall cannot be told apart.
        if s < s0 {
            bail!(
                "the CPU of {n} fell during the run ({s0:.2} s to {s:.2} s): a thread of it exited"
            );
        }
        cpu.insert(n.clone(), s - s0);
    }
    let elapsed = (end.saturating_sub(start_ms)) as f64 / 1000.0;
    let mut since_start: Vec<f64> = bound
        .values()
        .map(|&b| b.saturating_sub(start_ms) as f64 / 1000.0)
        .collect();
    since_start.sort_by(f64::total_cmp);
    let mut since_created: Vec<f64> = bound
        .iter()
        .filter_map(|(n, &b)| created.get(n).map(|&c| b.saturating_sub(c) as f64 / 1000.0))
        .collect();
    since_created.sort_by(f64::total_cmp);
    let out = json!({
        "pods": bound.len(),
        "scheduled_events_at_end": scheduled_events,
        "seconds": elapsed,
        "pods_per_second": if elapsed > 0.0 { bound.len() as f64 / elapsed } else { 0.0 },
        // How long the scheduler took to bind its first pod after the start mark (taking the
        // Lease, its first cycle and binding write).
        "start_to_first_bound_s": since_start.first().copied(),
        "start_to_bound_p50_s": percentile(&since_start, 0.5),
        "start_to_bound_p99_s": percentile(&since_start, 0.99),
        "creation_to_bound_p50_s": percentile(&since_created, 0.5),
        "creation_to_bound_p99_s": percentile(&since_created, 0.99),
        "cpu_seconds": cpu,
        "cpu_ms_per_pod": cpu.iter().map(|(n, s)| (n.clone(), s * 1000.0 / bound.len().max(1) as f64)).collect::<HashMap<_, _>>(),
    });
    println!("{out}");
    Ok(())
}

/// One HTTP/1.1 POST on a keep-alive connection; returns the status and body. Hand-written:
/// this crate has no HTTP client, and one request shape needs no more.
async fn post(
    conn: &mut tokio::io::BufStream<tokio::net::TcpStream>,
    host: &str,
    path: &str,
    body: &[u8],
) -> Result<(u16, Vec<u8>)> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await?;
    conn.write_all(body).await?;
    conn.flush().await?;
    let mut line = String::new();
    conn.read_line(&mut line).await?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("bad status line {line:?}"))?;
    let mut length = 0usize;
    loop {
        line.clear();
        conn.read_line(&mut line).await?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse()?;
        }
    }
    let mut out = vec![0u8; length];
    conn.read_exact(&mut out).await?;
    Ok((status, out))
}

async fn extender_latency(url: &str, profile: &str, nodes: usize, calls: usize) -> Result<()> {
    let names: Vec<String> = (0..nodes).map(node_name).collect();
    let body = json!({
        "Pod": {"metadata": {"name": "latency-probe", "namespace": "default", "uid": "u"},
                "spec": {"containers": [{"name": "c", "image": "x",
                          "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}},
        "NodeNames": names
    })
    .to_string();
    let stream = tokio::net::TcpStream::connect(url)
        .await
        .with_context(|| format!("connecting to the extender at {url}"))?;
    stream.set_nodelay(true)?;
    let mut conn = tokio::io::BufStream::new(stream);
    let mut out = serde_json::Map::new();
    for verb in ["filter", "prioritize"] {
        let path = format!("/extender/v1/{profile}/{verb}");
        // Warm-up.
        for _ in 0..10 {
            post(&mut conn, url, &path, body.as_bytes()).await?;
        }
        let mut ms = Vec::with_capacity(calls);
        for _ in 0..calls {
            let t = Instant::now();
            let (status, reply) = post(&mut conn, url, &path, body.as_bytes()).await?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            if status != 200 {
                bail!("{verb}: HTTP {status}: {}", String::from_utf8_lossy(&reply));
            }
        }
        ms.sort_by(f64::total_cmp);
        let pct = |p: f64| ms[((ms.len() as f64 * p).ceil() as usize).clamp(1, ms.len()) - 1];
        out.insert(
            verb.into(),
            json!({"p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": pct(1.0), "calls": calls}),
        );
    }
    println!("{}", serde_json::Value::Object(out));
    Ok(())
}

async fn score_latency(scorer: &str, phase: Duration, pause: Duration) -> Result<()> {
    let channel = tonic::transport::Endpoint::from_shared(scorer.to_string())?
        .connect()
        .await
        .context("connecting to the scorer")?;
    let mut client = ScorerClient::new(channel);
    let request = pb::ScoreRequest {
        pod: Some(pb::score_request::Pod::Description(pb::PodDescription {
            name: "probe".into(),
            requests: [("cpu", "100m"), ("memory", "64Mi")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        })),
        limit: 5,
        ..Default::default()
    };
    let start = Instant::now();
    let end = start + phase;
    // (seconds into the probe, milliseconds) of every answered call.
    let (mut calls, mut errors) = (Vec::new(), 0u64);
    while Instant::now() < end {
        let t = Instant::now();
        match client.score(request.clone()).await {
            Ok(_) => calls.push(((t - start).as_secs_f64(), t.elapsed().as_secs_f64() * 1e3)),
            Err(_) => errors += 1,
        }
        tokio::time::sleep(pause).await;
    }
    calls.sort_by(|a, b| b.1.total_cmp(&a.1));
    let slowest: Vec<_> = calls
        .iter()
        .take(5)
        .map(|(at, ms)| json!([(at * 10.0).round() / 10.0, (ms * 10.0).round() / 10.0]))
        .collect();
    // Slowest first above: reversed, the latencies in ascending order.
    let ms: Vec<f64> = calls.iter().rev().map(|c| c.1).collect();
    println!(
        "{}",
        json!({"calls": ms.len(), "errors": errors,
               "p50_ms": percentile(&ms, 0.5), "p99_ms": percentile(&ms, 0.99),
               "max_ms": ms.last().copied().unwrap_or(f64::NAN), "slowest": slowest})
    );
    Ok(())
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    if let Cmd::Agents {
        scorer,
        count,
        connections,
        threads,
    } = &cli.command
    {
        return agents(scorer, *count, *connections, *threads);
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the Tokio runtime")?
        .block_on(run(cli))
}

async fn run(cli: Cli) -> Result<()> {
    if let Cmd::ExtenderLatency {
        url,
        profile,
        nodes,
        calls,
    } = &cli.command
    {
        return extender_latency(url, profile, *nodes, *calls).await;
    }
    if let Cmd::ScoreLatency {
        scorer,
        seconds,
        pause_ms,
    } = &cli.command
    {
        return score_latency(
            scorer,
            Duration::from_secs(*seconds),
            Duration::from_millis(*pause_ms),
        )
        .await;
    }
    match cli.command {
        Cmd::ExtenderLatency { .. } | Cmd::ScoreLatency { .. } => {}
        Cmd::AuthLoad {
            scorer,
            streams,
            logins_per_second,
            seconds,
            pid,
        } => {
            let c = client(&cli.kubeconfig).await?;
            auth_load::run(
                &c,
                &scorer,
                auth_load::Load {
                    streams,
                    logins_per_second,
                    phase: Duration::from_secs(seconds),
                    pid,
                },
            )
            .await?
        }
        Cmd::Nodes { count } => create_nodes(&client(&cli.kubeconfig).await?, count).await?,
        Cmd::Pods {
            namespace,
            scheduler,
            count,
            constrained_percent,
        } => {
            let c = client(&cli.kubeconfig).await?;
            create_pods(&c, &namespace, &scheduler, count, constrained_percent).await?;
            println!("{}", now_ms());
        }
        Cmd::Agents { .. } => bail!("`agents` runs on threads of its own, started by main"),
        Cmd::ReleaseLease {
            namespace,
            name,
            start_file,
        } => {
            let leases: Api<Lease> = Api::namespaced(client(&cli.kubeconfig).await?, &namespace);
            leases
                .get(&name)
                .await
                .with_context(|| format!("reading the Lease {namespace}/{name}"))?;
            let start = now_ms();
            write_start_mark(&start_file, start)?;
            leases
                .delete(&name, &DeleteParams::default())
                .await
                .with_context(|| format!("deleting the Lease {namespace}/{name}"))?;
            println!("{start}");
        }
        Cmd::Ready {
            scorer,
            count,
            timeout,
        } => ready(&scorer, count, timeout).await?,
        Cmd::Wait {
            namespace,
            count,
            start_ms,
            start_file,
            pids,
            timeout,
        } => {
            let start = match start_file {
                Some(f) => Start::File(f),
                None => Start::Ms(start_ms.unwrap_or_else(now_ms)),
            };
            wait(
                &client(&cli.kubeconfig).await?,
                &namespace,
                count,
                start,
                &pids,
                timeout,
            )
            .await?
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn start_mark_waits_for_a_number_in_the_file_and_gives_up_at_the_deadline() {
        let dir = std::env::temp_dir().join(format!("sb-start-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let file = dir.join("start");
        let soon = || Instant::now() + Duration::from_millis(30);
        // No file, an empty one, or not a number: no mark by the deadline. (A whole mark is
        // written beside the file and renamed by `write_start_mark`, `release-lease`'s.)
        assert!(start_mark(&file, soon()).await.is_err());
        std::fs::write(&file, "").expect("writable");
        assert!(start_mark(&file, soon()).await.is_err());
        std::fs::write(&file, "soon\n").expect("writable");
        assert!(start_mark(&file, soon()).await.is_err());
        let writer = {
            let file = file.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                write_start_mark(&file, 1_764_580_000_123).expect("writable");
            })
        };
        let ms = start_mark(&file, Instant::now() + Duration::from_secs(10)).await;
        writer.await.expect("the writer task");
        assert_eq!(ms.expect("a mark"), 1_764_580_000_123);
        // Nothing is left beside it.
        let left: Vec<_> = std::fs::read_dir(&dir)
            .expect("readable")
            .map(|e| e.expect("an entry").file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("start")]);
        std::fs::remove_dir_all(&dir).expect("removable");
    }

    #[test]
    fn accounts_a_process_or_its_threads_of_one_name() {
        assert_eq!(Account::parse("42"), Some(Account::Process(42)));
        assert_eq!(
            Account::parse("42/loadstar-grpc"),
            Some(Account::Threads(42, "loadstar-grpc".into()))
        );
        assert_eq!(Account::parse("42/"), None);
        assert_eq!(Account::parse("42/sixteen-bytes-xx"), None);
        assert_eq!(Account::parse("x/loadstar-grpc"), None);
        assert_eq!(Account::parse(""), None);
        // This test's own threads: the process has CPU; a name no thread has, none.
        let me = std::process::id();
        assert!(Account::Process(me).cpu_seconds().is_some());
        assert_eq!(
            Account::Threads(me, "no-such-thread".into()).cpu_seconds(),
            None
        );
        let main = std::fs::read_to_string(format!("/proc/{me}/comm")).expect("own comm");
        assert!(
            Account::Threads(me, main.trim_end().to_string())
                .cpu_seconds()
                .is_some()
        );
    }
}
