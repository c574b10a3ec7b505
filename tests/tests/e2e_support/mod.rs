//! Shared harness of the end-to-end suite against a real kube-apiserver (started by
//! `tests/e2e/run.sh`): admin client, kubelet-less Node objects, pods, the scorer binary run
//! under its ServiceAccount's token, simulated agents streaming controlled loads, and
//! "eventually" waits with deadlines.
#![allow(dead_code, missing_docs)]

pub mod faults;
pub mod kube_scheduler;
pub mod webdriver;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use loadstar_proto::pb;
use loadstar_proto::pb::scorer_client::ScorerClient;
use loadstar_testkit::agent::{self as simagent, SyntheticLoad};
use serde_json::json;
use tokio::task::JoinHandle;

/// Skips (returns early) unless run by `tests/e2e/run.sh`.
pub fn env_or_skip() -> Option<E2eEnv> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (
        get("LOADSTAR_E2E_ADMIN_KUBECONFIG"),
        get("LOADSTAR_E2E_SCORER_KUBECONFIG"),
        get("LOADSTAR_E2E_SCORER_BIN"),
    ) {
        (Some(a), Some(s), Some(b)) => Some(E2eEnv {
            admin_kubeconfig: a.into(),
            scorer_kubeconfig: s.into(),
            scorer_bin: b.into(),
            logs: get("LOADSTAR_E2E_LOGS")
                .map(PathBuf::from)
                .unwrap_or_else(std::env::temp_dir),
        }),
        _ => {
            eprintln!(
                "skipping: run through tests/e2e/run.sh (needs LOADSTAR_E2E_ADMIN_KUBECONFIG, \
                 LOADSTAR_E2E_SCORER_KUBECONFIG, LOADSTAR_E2E_SCORER_BIN)"
            );
            None
        }
    }
}

/// The value of `var`, which the suite's runner script (`runner`) sets; an error naming both
/// when it is missing or empty.
pub fn required(var: &str, runner: &str) -> Result<String> {
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .with_context(|| format!("{var} is not set ({runner} sets it)"))
}

/// Where the suite's cluster and binaries are.
#[derive(Debug, Clone)]
pub struct E2eEnv {
    pub admin_kubeconfig: PathBuf,
    pub scorer_kubeconfig: PathBuf,
    pub scorer_bin: PathBuf,
    pub logs: PathBuf,
}

impl E2eEnv {
    pub async fn admin(&self) -> Result<Client> {
        let kc = Kubeconfig::read_from(&self.admin_kubeconfig)?;
        let mut cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
        cfg.read_timeout = Some(Duration::from_secs(60));
        Ok(Client::try_from(cfg)?)
    }
}

/// Polls `check` until it returns `Ok(Some(v))`, failing after `timeout` with the last
/// observation it reported.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<std::result::Result<T, String>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(seen)) => seen,
            Err(e) => format!("error: {e:#}"),
        };
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A fresh namespace for one test.
pub async fn namespace(client: &Client, prefix: &str) -> Result<String> {
    let name = format!("{prefix}-{:06x}", rand_u32() & 0xff_ffff);
    let api: Api<Namespace> = Api::all(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}}))?,
    )
    .await
    .with_context(|| format!("creating namespace {name}"))?;
    Ok(name)
}

pub fn rand_u32() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish() as u32
}

/// A Node object with no kubelet: created with its capacity, then made Ready through a
/// status patch (as a kubelet would).
pub async fn create_node(client: &Client, name: &str, cpu: &str, memory: &str) -> Result<()> {
    create_node_with(client, name, cpu, memory, json!({})).await
}

pub async fn create_node_with(
    client: &Client,
    name: &str,
    cpu: &str,
    memory: &str,
    spec: serde_json::Value,
) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "loadstar-e2e": "true"}},
        "spec": spec,
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}
        }
    }))?;
    api.create(&PostParams::default(), &node)
        .await
        .with_context(|| format!("creating node {name}"))?;
    set_node_ready(client, name, true).await
}

pub async fn set_node_ready(client: &Client, name: &str, ready: bool) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = if ready { "True" } else { "False" };
    let patch = json!({"status": {"conditions": [{
        "type": "Ready", "status": status, "reason": "SimulatedKubelet",
        "message": "node object without a kubelet (loadstar e2e)",
        "lastHeartbeatTime": now, "lastTransitionTime": now
    }]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .with_context(|| format!("patching node {name} status"))?;
    Ok(())
}

pub async fn delete_nodes(client: &Client, names: &[String]) {
    let api: Api<Node> = Api::all(client.clone());
    for n in names {
        let _ = api.delete(n, &DeleteParams::default()).await;
    }
}

/// Deletes every pod of `ns` at once (grace 0).
pub async fn delete_pods_now(client: &Client, ns: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let _ = api.delete_collection(&params, &ListParams::default()).await;
}

/// PriorityClasses `e2e-high` (1000), `e2e-mid` (100), `e2e-low` (10) and
/// `e2e-high-never` (1000, `preemptionPolicy: Never`), created once.
pub async fn priority_classes(client: &Client) -> Result<()> {
    let api: Api<PriorityClass> = Api::all(client.clone());
    for (name, value, policy) in [
        ("e2e-high", 1000, "PreemptLowerPriority"),
        ("e2e-mid", 100, "PreemptLowerPriority"),
        ("e2e-low", 10, "PreemptLowerPriority"),
        ("e2e-high-never", 1000, "Never"),
    ] {
        let pc: PriorityClass = serde_json::from_value(json!({
            "metadata": {"name": name}, "value": value, "preemptionPolicy": policy
        }))?;
        match api.create(&PostParams::default(), &pc).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e).context("creating priority class"),
        }
    }
    Ok(())
}

/// A pod spec for `scheduler` requesting `cpu` and `memory`.
pub fn pod(name: &str, scheduler: Option<&str>, cpu: &str, memory: &str) -> serde_json::Value {
    let mut spec = json!({
        "containers": [{"name": "c", "image": "registry.invalid/pause:3",
                        "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
    });
    if let Some(s) = scheduler {
        spec["schedulerName"] = json!(s);
    }
    json!({"metadata": {"name": name, "labels": {"app": "e2e"}}, "spec": spec})
}

pub async fn create_pod(client: &Client, ns: &str, pod: serde_json::Value) -> Result<Pod> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let p: Pod = serde_json::from_value(pod)?;
    api.create(&PostParams::default(), &p)
        .await
        .context("creating pod")
}

/// Creates many pods concurrently.
pub async fn create_pods(client: &Client, ns: &str, pods: Vec<serde_json::Value>) -> Result<()> {
    let results: Vec<Result<Pod>> = futures::stream::iter(pods)
        .map(|p| create_pod(client, ns, p))
        .buffer_unordered(32)
        .collect()
        .await;
    for r in results {
        r?;
    }
    Ok(())
}

pub async fn pods(client: &Client, ns: &str) -> Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(api.list(&ListParams::default()).await?.items)
}

pub fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

pub fn name_of(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

/// Waits until every pod of `ns` named in `names` (all pods when empty) is bound; returns
/// pod → node.
pub async fn wait_bound(
    client: &Client,
    ns: &str,
    expected: usize,
    timeout: Duration,
) -> Result<BTreeMap<String, String>> {
    eventually(
        &format!("{expected} pods bound in {ns}"),
        timeout,
        || async {
            let ps = pods(client, ns).await?;
            let bound: BTreeMap<String, String> = ps
                .iter()
                .filter_map(|p| node_of(p).map(|n| (name_of(p), n)))
                .collect();
            if bound.len() >= expected {
                Ok(Ok(bound))
            } else {
                Ok(Err(format!("{}/{} bound", bound.len(), expected)))
            }
        },
    )
    .await
}

pub async fn events(client: &Client, ns: &str) -> Result<Vec<Event>> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    Ok(api.list(&ListParams::default()).await?.items)
}

/// The scorer binary, running under the ServiceAccount's token.
pub struct Scorer {
    child: Option<Child>,
    pub identity: String,
    pub grpc: SocketAddr,
    /// `/metrics`, `/healthz`, `/readyz`.
    pub http: SocketAddr,
    pub log: PathBuf,
}

/// How long a scorer may take to listen on gRPC after it is spawned.
const SCORER_START_TIMEOUT: Duration = Duration::from_secs(30);

pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

impl Scorer {
    /// Starts `loadstar-scorer serve` with `extra` flags and authentication off
    /// (`--insecure-allow-unauthenticated`: these tests' agents and clients are processes on
    /// this machine, not pods with tokens); waits until its gRPC port answers. The
    /// authentication tests use [`Scorer::start_authenticated`].
    pub async fn start(
        env: &E2eEnv,
        identity: &str,
        lease: &str,
        extra: &[&str],
    ) -> Result<Scorer> {
        let mut args = vec!["--insecure-allow-unauthenticated"];
        args.extend_from_slice(extra);
        Self::start_authenticated(env, identity, lease, &args).await
    }

    /// Starts `loadstar-scorer serve` as deployed: callers authenticated (TokenReview,
    /// SubjectAccessReview), plus `extra` flags.
    pub async fn start_authenticated(
        env: &E2eEnv,
        identity: &str,
        lease: &str,
        extra: &[&str],
    ) -> Result<Scorer> {
        Self::start_as(env, &env.scorer_kubeconfig, identity, lease, extra).await
    }

    /// Starts `loadstar-scorer serve` with the credentials of `kubeconfig`, plus `extra`.
    pub async fn start_as(
        env: &E2eEnv,
        kubeconfig: &std::path::Path,
        identity: &str,
        lease: &str,
        extra: &[&str],
    ) -> Result<Scorer> {
        Self::start_at(env, kubeconfig, identity, lease, None, extra).await
    }

    /// As [`Scorer::start_as`], with gRPC listening on `listen` (e.g. `0.0.0.0:port`, to be
    /// reached on other loopback addresses, or a dead scorer's port) instead of a free
    /// port on 127.0.0.1. [`Scorer::endpoint`] stays on 127.0.0.1.
    pub async fn start_at(
        env: &E2eEnv,
        kubeconfig: &std::path::Path,
        identity: &str,
        lease: &str,
        listen: Option<SocketAddr>,
        extra: &[&str],
    ) -> Result<Scorer> {
        let listen = match listen {
            Some(a) => a,
            None => format!("127.0.0.1:{}", free_port()?).parse()?,
        };
        let grpc: SocketAddr = format!("127.0.0.1:{}", listen.port()).parse()?;
        let http: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let log = env.logs.join(format!("scorer-{identity}.log"));
        let out = std::fs::File::create(&log)?;
        let mut cmd = Command::new(&env.scorer_bin);
        cmd.arg("serve")
            .arg("--kubernetes=on")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--listen")
            .arg(listen.to_string())
            .arg(format!("--metrics-listen={http}"))
            .arg("--leader-elect-namespace=loadstar")
            .arg(format!("--leader-elect-name={lease}"))
            .arg(format!("--leader-elect-identity={identity}"))
            .args(extra)
            .env("RUST_LOG", "info,loadstar_kube=debug")
            .env("NO_COLOR", "1")
            .stdout(out.try_clone()?)
            .stderr(out)
            .stdin(Stdio::null());
        let child = cmd.spawn().context("starting loadstar-scorer")?;
        let mut s = Scorer {
            child: Some(child),
            identity: identity.to_string(),
            grpc,
            http,
            log,
        };
        // A scorer that exits fails the start at once; either way the error carries its exit
        // status and its log's last lines, so a CI log says why it never listened.
        let deadline = Instant::now() + SCORER_START_TIMEOUT;
        loop {
            let seen = match tokio::net::TcpStream::connect(grpc).await {
                Ok(_) => return Ok(s),
                Err(e) => e.to_string(),
            };
            if let Some(status) = s.exited() {
                bail!(
                    "scorer {identity} exited ({status}) before its gRPC port {grpc} answered; \
                     its log ({}) ends:\n{}",
                    s.log.display(),
                    s.log_tail()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "scorer {identity} (pid {:?}) did not answer on its gRPC port {grpc} within \
                     {SCORER_START_TIMEOUT:?} (last seen: {seen}); its log ({}) ends:\n{}",
                    s.pid(),
                    s.log.display(),
                    s.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.grpc)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// `Some(status)` once the process has exited by itself.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGKILL: no chance to release the lease.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then wait for exit (bounded).
    pub async fn terminate(&mut self, limit: Duration) -> Result<std::process::ExitStatus> {
        let Some(mut c) = self.child.take() else {
            bail!("already stopped")
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        let deadline = Instant::now() + limit;
        loop {
            if let Some(st) = c.try_wait()? {
                return Ok(st);
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                bail!("scorer did not exit within {limit:?} of SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Scorer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Simulated agents: one report stream per node, to every given scorer, every `interval`.
pub struct Agents {
    tasks: Vec<JoinHandle<()>>,
}

impl Agents {
    pub async fn start(
        scorers: &[String],
        nodes: &[(String, SyntheticLoad)],
        interval: Duration,
    ) -> Result<Agents> {
        let mut tasks = Vec::new();
        for endpoint in scorers {
            let channel = tonic::transport::Endpoint::from_shared(endpoint.clone())?
                .connect()
                .await
                .with_context(|| format!("connecting agents to {endpoint}"))?;
            for (node, load) in nodes.iter().cloned() {
                let channel = channel.clone();
                tasks.push(tokio::spawn(async move {
                    let capacity = simagent::capacity(8, 32);
                    let instance = format!("e2e-{node}-{:x}", rand_u32());
                    let (tx, stream) = simagent::open_stream(channel);
                    let mut seq = 0u64;
                    let mut tick = tokio::time::interval(interval);
                    loop {
                        tick.tick().await;
                        seq += 1;
                        let r = simagent::report(&node, &instance, seq, &capacity, load);
                        if tx.send(r).await.is_err() {
                            break;
                        }
                    }
                    stream.abort();
                }));
            }
        }
        Ok(Agents { tasks })
    }
}

impl Drop for Agents {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A synthetic load with the given CPU and memory utilisation.
pub fn load(cpu: f64, memory: f64) -> SyntheticLoad {
    SyntheticLoad {
        cpu,
        memory,
        ..SyntheticLoad::default()
    }
}

/// The pod's PodScheduled condition (status, reason, message), if any.
pub fn scheduled_condition(p: &Pod) -> Option<(String, String, String)> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

/// Waits until the scorer has fresh agent load for every node in `nodes`.
pub async fn reports_visible(scorer: &Scorer, nodes: &[String]) -> Result<()> {
    let sc = ScorerClient::connect(scorer.endpoint()).await?;
    eventually("agent reports visible", Duration::from_secs(20), || {
        let mut sc = sc.clone();
        async move {
            let list = sc
                .list_nodes(pb::ListNodesRequest::default())
                .await?
                .into_inner();
            let fresh = list
                .nodes
                .iter()
                .filter(|n| nodes.contains(&n.node_name) && !n.stale)
                .count();
            Ok(if fresh == nodes.len() {
                Ok(())
            } else {
                Err(format!("{fresh} fresh"))
            })
        }
    })
    .await
}
