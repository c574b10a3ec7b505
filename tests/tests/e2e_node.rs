//! Loadstar on a real node (issue #16), run by `tests/e2e/node-run.sh`: a kubelet with
//! containerd and runc, the control plane of the e2e suite, and the Helm chart installed on
//! it. The agent runs as a DaemonSet pod and reads the host through its mounts; the scorer
//! runs in-cluster; pods it binds start; the agent's per-pod reading is checked against the
//! pod's own cgroup; the agent's footprint is measured from its cgroup and its process; the
//! scorer holds the leader Lease with its ServiceAccount's credentials; and deleting the agent
//! pod is timed until the node reports again, checking the default profile's stale policy on
//! the way. `autoscale`: the StepScaler and the real HPA on Loadstar's `metrics.k8s.io` (issue
//! #19). Every figure is printed (recorded in bench/README.md).
// Named to sort after `the_chart_runs_on_a_real_node` (libtest runs tests in name order): it
// upgrades the release that test installs.
mod e2e_support;
#[path = "e2e_node/autoscale.rs"]
mod with_autoscaling;

/// The script that runs this suite and sets its environment.
const RUNNER: &str = "tests/e2e/node-run.sh";

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use e2e_support::*;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret, Service, ServiceAccount};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, LogParams};
use loadstar_common::quantity::{parse_millis, parse_units};
use loadstar_proto::pb;
use loadstar_proto::pb::scorer_client::ScorerClient;
use serde_json::json;
use tonic::transport::Channel;

const NS: &str = "loadstar";
const CGROUP: &str = "/sys/fs/cgroup";

struct NodeEnv {
    e2e: E2eEnv,
    node: String,
    helm: PathBuf,
    chart: PathBuf,
    burner: String,
    token: String,
}

fn node_env() -> Result<Option<NodeEnv>> {
    let Some(e2e) = env_or_skip() else {
        return Ok(None);
    };
    // The admin's static token: an authenticated caller for the scorer's queries.
    let kc: serde_norway::Value =
        serde_norway::from_str(&std::fs::read_to_string(&e2e.admin_kubeconfig)?)?;
    let token = kc["users"][0]["user"]["token"]
        .as_str()
        .context("admin kubeconfig without a token")?
        .to_string();
    Ok(Some(NodeEnv {
        node: required("LOADSTAR_E2E_NODE", RUNNER)?,
        helm: required("LOADSTAR_HELM", RUNNER)?.into(),
        chart: required("LOADSTAR_E2E_CHART", RUNNER)?.into(),
        burner: required("LOADSTAR_E2E_BURNER_IMAGE", RUNNER)?,
        e2e,
        token,
    }))
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The scorer's gRPC API through its Service (kube-proxy), as the admin.
struct Scorer {
    client: ScorerClient<Channel>,
    token: String,
}

/// The ClusterIP of the chart's scorer Service (no cluster DNS on this node).
async fn scorer_service_ip(admin: &Client) -> Result<String> {
    Api::<Service>::namespaced(admin.clone(), NS)
        .get("loadstar-scorer")
        .await?
        .spec
        .and_then(|s| s.cluster_ip)
        .context("scorer Service without a ClusterIP")
}

impl Scorer {
    async fn connect(admin: &Client, token: &str) -> Result<Scorer> {
        let ip = scorer_service_ip(admin).await?;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{ip}:50051"))?
            .connect_timeout(Duration::from_secs(3))
            .timeout(Duration::from_secs(5))
            .connect_lazy();
        Ok(Scorer {
            client: ScorerClient::new(channel),
            token: token.to_string(),
        })
    }

    /// `msg` with the admin's bearer token.
    fn request<T>(&self, msg: T) -> Result<tonic::Request<T>> {
        let mut r = tonic::Request::new(msg);
        r.metadata_mut()
            .insert("authorization", format!("Bearer {}", self.token).parse()?);
        Ok(r)
    }

    async fn node(&mut self, name: &str) -> Result<pb::NodeStatus> {
        let r = self.request(pb::GetNodeRequest {
            node_name: name.to_string(),
        })?;
        Ok(self.client.get_node(r).await?.into_inner())
    }

    /// The default profile (the first `ListProfiles` returns).
    async fn default_profile(&mut self) -> Result<pb::Profile> {
        let r = self.request(pb::ListProfilesRequest {})?;
        self.client
            .list_profiles(r)
            .await?
            .into_inner()
            .profiles
            .into_iter()
            .next()
            .context("the scorer lists no profile")
    }

    /// The default profile's verdict on `node` for a pod requesting `cpu` and `memory`.
    async fn score(&mut self, node: &str, cpu: &str, memory: &str) -> Result<pb::ScoreResponse> {
        let r = self.request(pb::ScoreRequest {
            pod: Some(pb::score_request::Pod::Description(pb::PodDescription {
                namespace: "default".into(),
                name: "stale-probe".into(),
                requests: [("cpu", cpu), ("memory", memory)]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            })),
            candidate_nodes: vec![node.to_string()],
            ..Default::default()
        })?;
        Ok(self.client.score(r).await?.into_inner())
    }

    /// The scorer's latest decision for pod `ns/name`.
    async fn explain(&mut self, ns: &str, name: &str) -> Result<pb::DecisionRecord> {
        let r = self.request(pb::ExplainPodRequest {
            pod: Some(pb::PodReference {
                namespace: ns.to_string(),
                name: name.to_string(),
            }),
        })?;
        Ok(self.client.explain_pod(r).await?.into_inner())
    }
}

/// `LoadVariationRiskBalancing`'s score for `node` from requests alone, as docs/policies.md
/// and the plugin give it for a node without fresh load (stale under `fallback`): per
/// resource μ = min(1, (requested + the pod's request) / allocatable), σ = 0, score
/// (1 − μ/2)·100; the smaller of the CPU and memory scores, rounded half away from zero.
/// Requested and allocatable as `GetNode` reports them.
fn lvrb_from_requests(n: &pb::NodeStatus, pod_cpu_m: i64, pod_mem: i64) -> Result<i64> {
    let get = |m: &std::collections::HashMap<String, String>,
               k: &str,
               parse: fn(&str) -> Result<i64, loadstar_common::quantity::QuantityError>|
     -> Result<i64> {
        match m.get(k) {
            Some(q) => parse(q).map_err(|e| anyhow::anyhow!("{k} {q:?}: {e}")),
            None => Ok(0),
        }
    };
    let one = |requested: i64, allocatable: i64, request: i64| -> Result<f64> {
        if allocatable <= 0 {
            bail!("node {} reports no allocatable", n.node_name);
        }
        let mu = ((requested + request) as f64 / allocatable as f64).clamp(0.0, 1.0);
        Ok((1.0 - mu / 2.0) * 100.0)
    };
    let cpu = one(
        get(&n.requested, "cpu", parse_millis)?,
        get(&n.allocatable, "cpu", parse_millis)?,
        pod_cpu_m,
    )?;
    let mem = one(
        get(&n.requested, "memory", parse_units)?,
        get(&n.allocatable, "memory", parse_units)?,
        pod_mem,
    )?;
    Ok((cpu.min(mem).round() as i64).clamp(0, 100))
}

/// The default profile's reaction to the stale node `node`, checked through `Score`: the
/// profile's policy must be the chart's `fallback` (docs/policies.md): the node stays feasible
/// (no filter rejects it for its old load), its score is marked stale, and the load-aware
/// `LoadVariationRiskBalancing` scores it from requests as if it had no agent. Retried while
/// the node's requests change under the call (the old agent pod leaving, the new one bound);
/// fails if the node turns fresh first. Returns (the plugin's score, the expected score).
async fn check_stale_reaction(scorer: &mut Scorer, node: &str) -> Result<(i64, i64)> {
    const LVRB: &str = "LoadVariationRiskBalancing";
    let profile = scorer.default_profile().await?;
    if profile.stale_policy != "fallback" {
        bail!(
            "the default profile {} has stale policy {:?}; this test checks the chart's \
             `fallback` (docs/policies.md): extend it for the new policy",
            profile.name,
            profile.stale_policy
        );
    }
    if !profile.plugins.iter().any(|p| p.name == LVRB) {
        bail!("the default profile {} has no {LVRB} score", profile.name);
    }
    let (pod_cpu, pod_mem) = ("100m", "64Mi");
    for _ in 0..20 {
        let before = scorer.node(node).await?;
        if !before.stale {
            bail!("node {node} was fresh again before its stale reaction was checked");
        }
        let resp = scorer.score(node, pod_cpu, pod_mem).await?;
        let after = scorer.node(node).await?;
        if !after.stale {
            bail!("node {node} turned fresh during the stale check");
        }
        if before.requested != after.requested {
            continue;
        }
        assert!(
            resp.filtered.is_empty(),
            "stale node {node} rejected under `fallback`: {:?} ({})",
            resp.filtered,
            resp.summary
        );
        let ranked = resp
            .ranked
            .iter()
            .find(|r| r.node_name == node)
            .with_context(|| format!("stale node {node} not ranked: {}", resp.summary))?;
        assert!(
            ranked.stale,
            "Score does not mark stale node {node} stale: {ranked:?}"
        );
        let got = ranked
            .plugins
            .iter()
            .find(|p| p.plugin == LVRB)
            .with_context(|| format!("no {LVRB} score for {node}: {ranked:?}"))?
            .score;
        let want = lvrb_from_requests(&after, parse_millis(pod_cpu)?, parse_units(pod_mem)?)?;
        assert!(
            (got - want).abs() <= 1,
            "{LVRB} scored stale node {node} {got}, not {want} from requests \
             (requested {:?}, allocatable {:?})",
            after.requested,
            after.allocatable
        );
        return Ok((got, want));
    }
    bail!("node {node}'s requests kept changing during the stale check")
}

fn report_time(n: &pb::NodeStatus) -> f64 {
    n.last_report
        .as_ref()
        .map(|r| r.sample_time_unix_nanos as f64 / 1e9)
        .unwrap_or(0.0)
}

fn cpu_latest(n: &pb::NodeStatus) -> Option<f64> {
    n.last_report.as_ref().and_then(|r| {
        r.usage
            .iter()
            .find(|u| u.resource == pb::Resource::Cpu as i32)
            .map(|u| u.latest_ratio)
    })
}

fn pod_usage(n: &pb::NodeStatus, uid: &str) -> Option<pb::PodUsage> {
    n.last_report
        .as_ref()
        .and_then(|r| r.pods.iter().find(|p| p.pod_uid == uid).cloned())
}

/// The pod's cgroup directory in `controller` (kubelet cgroupfs layout: guaranteed pods
/// directly under kubepods, the others under their QoS class).
fn pod_cgroup(controller: &str, uid: &str) -> Result<PathBuf> {
    let mut base = Path::new(CGROUP).join(controller).join("kubepods");
    if !base.is_dir() && controller == "cpuacct" {
        base = Path::new(CGROUP).join("cpu,cpuacct").join("kubepods");
    }
    for qos in ["", "burstable", "besteffort"] {
        let p = base.join(qos).join(format!("pod{uid}"));
        if p.is_dir() {
            return Ok(p);
        }
    }
    bail!("no cgroup for pod {uid} under {}", base.display())
}

fn read_u64(p: &Path) -> Result<u64> {
    std::fs::read_to_string(p)
        .with_context(|| p.display().to_string())?
        .trim()
        .parse()
        .with_context(|| format!("{} is not a number", p.display()))
}

/// CPU seconds the pod's cgroup has used (cgroup v1 `cpuacct`, mounted on its own here or as `cpu,cpuacct`).
fn cgroup_cpu_seconds(uid: &str) -> Result<f64> {
    Ok(read_u64(&pod_cgroup("cpuacct", uid)?.join("cpuacct.usage"))? as f64 / 1e9)
}

/// `memory.stat` of the pod's cgroup: the `total_<key>` value, bytes.
fn cgroup_memory_stat(uid: &str, key: &str) -> Result<u64> {
    let stat = std::fs::read_to_string(pod_cgroup("memory", uid)?.join("memory.stat"))?;
    let prefix = format!("total_{key} ");
    stat.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("no total_{key} in memory.stat"))
}

/// The pod's memory working set as the kubelet counts it: usage − inactive file.
fn cgroup_working_set(uid: &str) -> Result<u64> {
    let dir = pod_cgroup("memory", uid)?;
    let usage = read_u64(&dir.join("memory.usage_in_bytes"))?;
    let stat = std::fs::read_to_string(dir.join("memory.stat"))?;
    let inactive = stat
        .lines()
        .find_map(|l| l.strip_prefix("total_inactive_file "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    Ok(usage.saturating_sub(inactive))
}

/// Host PIDs of every process in the pod (its containers and its sandbox): the `cgroup.procs`
/// of the pod's memory cgroup and of every cgroup under it (this suite runs as root in the
/// host's PID namespace, so they are `/proc` PIDs here).
fn pod_pids(uid: &str) -> Result<Vec<u32>> {
    let mut pids = Vec::new();
    let mut dirs = vec![pod_cgroup("memory", uid)?];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).with_context(|| dir.display().to_string())? {
            let e = e?;
            if e.file_type()?.is_dir() {
                dirs.push(e.path());
            }
        }
        let procs = std::fs::read_to_string(dir.join("cgroup.procs"))?;
        pids.extend(procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    Ok(pids)
}

/// A `kB` line of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in bytes.
fn proc_status_bytes(pid: u32, key: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .with_context(|| format!("no {key} in /proc/{pid}/status"))
}

/// A child process killed (and reaped) on drop, with the file its stderr goes to.
struct Peer {
    child: std::process::Child,
    log: std::path::PathBuf,
}

impl Peer {
    /// Starts `bin` with `args` and none of this run's `LOADSTAR_*` variables (its flags say
    /// it all), stderr to `log`.
    fn spawn(bin: &str, args: &[&str], log: std::path::PathBuf) -> Result<Peer> {
        let mut cmd = std::process::Command::new(bin);
        cmd.args(args).env("RUST_LOG", "warn");
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("LOADSTAR_") {
                cmd.env_remove(k);
            }
        }
        let child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {bin}"))?;
        Ok(Peer { child, log })
    }

    /// Fails when the process has exited.
    fn check_running(&mut self, what: &str) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("the {what} exited ({status}); see {}", self.log.display());
        }
        Ok(())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agent release binary run as a host process (`LOADSTAR_E2E_AGENT_BIN`, exported by
/// node-run.sh), sampling every second and streaming to a stub scorer
/// (`LOADSTAR_E2E_STUB_SCORER_BIN`) as `bench/agent-footprint.sh` runs it: the in-pod
/// agent's peer. Both are killed on drop; their stderr goes to `LOADSTAR_E2E_LOGS`.
struct HostAgent {
    agent: Peer,
    stub: Peer,
}

impl HostAgent {
    fn start() -> Result<Self> {
        let var = |name: &str| {
            std::env::var(name).with_context(|| format!("{name} is not set (node-run.sh sets it)"))
        };
        let (agent_bin, stub_bin) = (
            var("LOADSTAR_E2E_AGENT_BIN")?,
            var("LOADSTAR_E2E_STUB_SCORER_BIN")?,
        );
        let logs = std::path::PathBuf::from(var("LOADSTAR_E2E_LOGS")?);
        std::fs::create_dir_all(&logs)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let addr = format!("127.0.0.1:{port}");
        let stub = Peer::spawn(
            &stub_bin,
            &[addr.as_str(), "--quiet"],
            logs.join("host-stub-scorer.log"),
        )?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(&addr).is_err() {
            if Instant::now() > deadline {
                bail!("the stub scorer never listened on {addr}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let scorer = format!("http://{addr}");
        let args = [
            "--scorer",
            scorer.as_str(),
            "--interval",
            "1s",
            "--metrics-addr",
            "127.0.0.1:0",
        ];
        let agent = Peer::spawn(&agent_bin, &args, logs.join("host-agent.log"))?;
        Ok(Self { agent, stub })
    }

    fn pid(&self) -> u32 {
        self.agent.child.id()
    }

    /// Fails when the peer or its scorer has exited (a dead peer's run time stops growing).
    fn check_running(&mut self) -> Result<()> {
        self.agent.check_running("host agent peer")?;
        self.stub.check_running("host agent peer's stub scorer")
    }

    /// Run time summed over the process's threads (`/proc/<pid>/task/*/schedstat`, ns).
    fn cpu_seconds(&self) -> Result<f64> {
        let mut ns = 0u64;
        let mut read = 0;
        for task in std::fs::read_dir(format!("/proc/{}/task", self.pid()))? {
            // A thread that ended since the listing took its time with it; skip it.
            let stat = match std::fs::read_to_string(task?.path().join("schedstat")) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                r => r?,
            };
            ns += stat
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .with_context(|| format!("unreadable schedstat {stat:?}"))?;
            read += 1;
        }
        if read == 0 {
            bail!("no thread of the host agent {} had a schedstat", self.pid());
        }
        Ok(ns as f64 / 1e9)
    }
}

/// The agent's process in its pod: the one process of the pod's cgroups named
/// `loadstar-agent`.
fn agent_pid(uid: &str) -> Result<u32> {
    let pids = pod_pids(uid)?;
    let named: Vec<(u32, String)> = pids
        .iter()
        .map(|&p| {
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            (p, comm.trim().to_string())
        })
        .collect();
    let agents: Vec<u32> = named
        .iter()
        .filter(|(_, c)| c == "loadstar-agent")
        .map(|(p, _)| *p)
        .collect();
    match agents[..] {
        [pid] => Ok(pid),
        _ => bail!("not exactly one loadstar-agent process in pod {uid}'s cgroups: {named:?}"),
    }
}

/// Status code and body of a plain HTTP GET.
async fn http_status(url: &str) -> Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").context("http only")?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut s = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(host))
        .await??;
    s.write_all(format!("GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").as_bytes())
        .await?;
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut text)).await??;
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no HTTP status from {url}: {text:?}"))?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Ok((code, body.to_string()))
}

/// The in-cluster scorer: one Ready pod running as the chart's ServiceAccount with only that
/// account's token for credentials (no kubeconfig; the token mounted by the ServiceAccount
/// admission plugin), holding and renewing the leader-election Lease under its pod name,
/// reporting itself ready and leading (`/readyz`, `loadstar_scorer_leader`, its log).
/// Returns (the pod's name, seconds from `since` until the Lease named it).
async fn check_scorer_in_cluster(admin: &Client, since: Instant) -> Result<(String, f64)> {
    const ACCOUNT: &str = "loadstar-scorer";
    const LEASE: &str = "loadstar-scorer";
    const TOKEN_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
    let pods_api = Api::<Pod>::namespaced(admin.clone(), NS);
    let scorer = eventually("the scorer pod Ready", Duration::from_secs(120), || async {
        let pods = pods_api
            .list(&ListParams::default().labels("app.kubernetes.io/component=scorer"))
            .await?;
        let ready: Vec<&Pod> = pods
            .items
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .collect();
        Ok(match ready[..] {
            [p] => Ok(p.clone()),
            _ => Err(format!(
                "{} scorer pods, {} Ready",
                pods.items.len(),
                ready.len()
            )),
        })
    })
    .await?;
    let name = scorer.metadata.name.clone().context("scorer pod name")?;
    let spec = scorer.spec.as_ref().context("scorer pod spec")?;

    // Its credentials: the chart's ServiceAccount, no kubeconfig, the account's token.
    assert_eq!(
        spec.service_account_name.as_deref(),
        Some(ACCOUNT),
        "the scorer pod runs as {:?}",
        spec.service_account_name
    );
    Api::<ServiceAccount>::namespaced(admin.clone(), NS)
        .get(ACCOUNT)
        .await
        .with_context(|| format!("ServiceAccount {NS}/{ACCOUNT}"))?;
    let c = spec
        .containers
        .iter()
        .find(|c| c.name == "scorer")
        .context("no scorer container")?;
    let args = c.args.clone().unwrap_or_default();
    assert!(
        !args.iter().any(|a| a.starts_with("--kubeconfig")),
        "the scorer is given a kubeconfig: {args:?}"
    );
    assert!(
        !c.env
            .iter()
            .flatten()
            .any(|e| e.name == "KUBECONFIG" || e.name == "LOADSTAR_KUBECONFIG"),
        "the scorer's environment names a kubeconfig"
    );
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == TOKEN_DIR)
        .with_context(|| format!("no ServiceAccount token mounted at {TOKEN_DIR}"))?;
    let volume = spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .with_context(|| format!("no volume {}", mount.name))?;
    let token_source = if let Some(secret) = &volume.secret {
        let sname = secret
            .secret_name
            .clone()
            .context("token volume without a secret")?;
        let s = Api::<Secret>::namespaced(admin.clone(), NS)
            .get(&sname)
            .await?;
        let owner = s
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kubernetes.io/service-account.name"))
            .cloned();
        assert_eq!(
            (s.type_.as_deref(), owner.as_deref()),
            (Some("kubernetes.io/service-account-token"), Some(ACCOUNT)),
            "the token Secret {sname} is not {ACCOUNT}'s"
        );
        format!("Secret {sname}")
    } else if volume.projected.as_ref().is_some_and(|p| {
        p.sources
            .iter()
            .flatten()
            .any(|s| s.service_account_token.is_some())
    }) {
        "a projected token".to_string()
    } else {
        bail!(
            "the token volume {} is neither a token Secret nor projected",
            volume.name
        );
    };

    // The Lease: held by this pod and renewed.
    let leases = Api::<Lease>::namespaced(admin.clone(), NS);
    let lease = eventually(
        "the scorer pod holding the Lease",
        Duration::from_secs(60),
        || async {
            let l = leases.get(LEASE).await?;
            let holder = l.spec.as_ref().and_then(|s| s.holder_identity.clone());
            Ok(if holder.as_deref() == Some(name.as_str()) {
                Ok(l)
            } else {
                Err(format!("holder {holder:?}"))
            })
        },
    )
    .await?;
    let held_after = since.elapsed().as_secs_f64();
    let renewed = |l: &Lease| l.spec.as_ref().and_then(|s| s.renew_time.clone());
    let first = renewed(&lease);
    eventually("the Lease renewed", Duration::from_secs(30), || async {
        let l = leases.get(LEASE).await?;
        let holder = l.spec.as_ref().and_then(|s| s.holder_identity.clone());
        Ok(if holder.as_deref() != Some(name.as_str()) {
            Err(format!("the Lease is held by {holder:?}"))
        } else if renewed(&l).is_some() && renewed(&l) != first {
            Ok(())
        } else {
            Err(format!("renewTime still {first:?}"))
        })
    })
    .await?;

    // Ready and leading, in its own words.
    let ip = scorer_service_ip(admin).await?;
    let (code, body) = http_status(&format!("http://{ip}:9090/readyz")).await?;
    assert_eq!(code, 200, "scorer /readyz: {code} {body}");
    let (_, metrics) = http_status(&format!("http://{ip}:9090/metrics")).await?;
    let leader = metrics
        .lines()
        .find_map(|l| l.strip_prefix("loadstar_scorer_leader "))
        .map(str::trim);
    assert_eq!(
        leader,
        Some("1"),
        "loadstar_scorer_leader on the scorer's /metrics"
    );
    let log = pods_api
        .logs(
            &name,
            &LogParams {
                container: Some("scorer".into()),
                ..LogParams::default()
            },
        )
        .await
        .context("the scorer pod's log")?;
    for line in ["Kubernetes scheduler started", "became the leader"] {
        assert!(
            log.lines().any(|l| l.contains(line) && l.contains(&name)),
            "no {line:?} naming {name} in the scorer's log:\n{log}"
        );
    }
    eprintln!(
        "scorer pod {name}: ServiceAccount {ACCOUNT} ({token_source} at {TOKEN_DIR}, no \
         kubeconfig), Lease {NS}/{LEASE} held and renewed, /readyz 200, \
         loadstar_scorer_leader 1"
    );
    Ok((name, held_after))
}

/// The values every install here uses. The node's kubelet evicts at 1 % free disk
/// (tests/e2e/node.sh: this machine's disk is often ~90 % full); the scorer's eviction
/// thresholds mirror the kubelet's, or it would see disk pressure the kubelet does not. No
/// cluster DNS here: agents reach the scorer through its Service's environment variable,
/// expanded by the kubelet. One replica, so that every query sees the reports.
fn node_values(env: &NodeEnv) -> Result<String> {
    let values = env.e2e.logs.join("node-values.yaml");
    std::fs::write(
        &values,
        "agent:\n  scorerAddresses: [\"http://$(LOADSTAR_SCORER_SERVICE_HOST):50051\"]\n\
         scorer:\n  replicas: 1\n  podDisruptionBudget: {enabled: false}\n  config:\n    \
         eviction:\n      hard:\n        memory.available: 100Mi\n        \
         nodefs.available: \"1%\"\n        nodefs.inodesFree: \"1%\"\n",
    )?;
    Ok(values.to_string_lossy().to_string())
}

fn helm(env: &NodeEnv, args: &[&str]) -> Result<String> {
    cluster_tool(&env.helm, args, &env.e2e.admin_kubeconfig)
}

/// Runs a cluster tool (helm, kubectl) with `args` against `kubeconfig`; its stdout, or an
/// error naming the command and carrying its stderr.
fn cluster_tool(bin: &Path, args: &[&str], kubeconfig: &Path) -> Result<String> {
    let name = bin.file_name().unwrap_or_default().to_string_lossy();
    let out = Command::new(bin)
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .with_context(|| format!("running {name}"))?;
    if !out.status.success() {
        bail!(
            "{name} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

async fn agent_pod(admin: &Client) -> Result<std::result::Result<Pod, String>> {
    let pods = Api::<Pod>::namespaced(admin.clone(), NS)
        .list(&ListParams::default().labels("app.kubernetes.io/component=agent"))
        .await?;
    let ready = |p: &Pod| {
        p.metadata.deletion_timestamp.is_none()
            && p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    Ok(match pods.items.iter().find(|p| ready(p)) {
        Some(p) => Ok(p.clone()),
        None => Err(format!(
            "{} agent pods, none Ready: {:?}",
            pods.items.len(),
            pods.items
                .iter()
                .map(|p| p.status.as_ref().and_then(|s| s.phase.clone()))
                .collect::<Vec<_>>()
        )),
    })
}

fn uid_of(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

/// A burner pod for Loadstar: `millicores` of CPU and `mib` of memory, requesting
/// `request_m` millicores and a bit more memory.
fn burner(
    env: &NodeEnv,
    name: &str,
    millicores: u32,
    mib: u32,
    request_m: u32,
) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "labels": {"app": "burner"}},
        "spec": {
            "schedulerName": "loadstar",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "burn", "image": env.burner, "imagePullPolicy": "Never",
                "args": [format!("--cpu-millicores={millicores}"), format!("--memory-mib={mib}")],
                "resources": {"requests": {"cpu": format!("{request_m}m"),
                                           "memory": format!("{}Mi", mib + 32)}}
            }]
        }
    })
}

async fn wait_running(admin: &Client, ns: &str, name: &str) -> Result<Pod> {
    let api: Api<Pod> = Api::namespaced(admin.clone(), ns);
    eventually(
        &format!("pod {ns}/{name} Running"),
        Duration::from_secs(90),
        || async {
            let p = api.get(name).await?;
            let phase = p.status.as_ref().and_then(|s| s.phase.clone());
            Ok(if phase.as_deref() == Some("Running") {
                Ok(p)
            } else {
                Err(format!("phase {phase:?}, node {:?}", node_of(&p)))
            })
        },
    )
    .await
}

/// [`wait_running`], failing with the scorer's last decision for the pod (e.g. a node
/// refused for its measured load while this machine is busy).
async fn running_or_why(admin: &Client, scorer: &mut Scorer, ns: &str, name: &str) -> Result<Pod> {
    match wait_running(admin, ns, name).await {
        Ok(p) => Ok(p),
        Err(e) => {
            let why = match scorer.explain(ns, name).await {
                Ok(r) => format!("{} {}: {}", r.outcome, r.node_name, r.summary),
                Err(x) => format!("no decision: {x:#}"),
            };
            let node = scorer
                .node(&std::env::var("LOADSTAR_E2E_NODE").unwrap_or_default())
                .await
                .ok()
                .and_then(|n| cpu_latest(&n));
            Err(e.context(format!(
                "the scorer's last decision for {ns}/{name}: {why} (node CPU now {node:?})"
            )))
        }
    }
}

#[tokio::test]
#[ignore = "needs a real node: tests/e2e/node-run.sh"]
async fn the_chart_runs_on_a_real_node() -> Result<()> {
    let Some(env) = node_env()? else {
        return Ok(());
    };
    let admin = env.e2e.admin().await?;
    let chart = env.chart.to_string_lossy().to_string();

    // 1. helm install → agent Ready → the node's first report.
    let values = node_values(&env)?;
    let t0 = Instant::now();
    helm(
        &env,
        &[
            "install",
            "loadstar",
            &chart,
            "--namespace",
            NS,
            "--create-namespace",
            "-f",
            &values,
        ],
    )?;
    let agent = eventually("the agent pod Ready", Duration::from_secs(120), || {
        agent_pod(&admin)
    })
    .await?;
    let agent_ready = t0.elapsed();
    let mut scorer = Scorer::connect(&admin, &env.token).await?;
    let first = loop {
        match scorer.node(&env.node).await {
            Ok(n) if n.last_report.is_some() => break n,
            Ok(_) | Err(_) if t0.elapsed() > Duration::from_secs(180) => {
                bail!("no report from the agent within 180 s of helm install")
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let first_report = t0.elapsed();
    let rep = first.last_report.as_ref().context("report")?;
    assert!(
        rep.collector_errors.is_empty(),
        "collector errors in the agent pod: {:?}",
        rep.collector_errors
    );
    eprintln!(
        "FIGURE helm install → agent Ready {:.1} s, → first report in GetNode {:.1} s; \
         resources {:?}, {} pods seen in kubepods",
        agent_ready.as_secs_f64(),
        first_report.as_secs_f64(),
        rep.usage.iter().map(|u| u.resource).collect::<Vec<_>>(),
        rep.pods.len()
    );

    // The scorer runs in-cluster: its ServiceAccount's credentials, the leader Lease.
    let (scorer_pod, lease_after) = check_scorer_in_cluster(&admin, t0).await?;
    eprintln!("FIGURE helm install → the Lease names scorer pod {scorer_pod}: {lease_after:.1} s");

    // 2. Pods for Loadstar are bound by the in-cluster scorer and start.
    let ns = namespace(&admin, "node").await?;
    // Pods need the namespace's default ServiceAccount token (the token controller's work).
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(admin.clone(), &ns);
    eventually(
        "the default ServiceAccount's token",
        Duration::from_secs(30),
        || async {
            Ok(match accounts.get_opt("default").await? {
                Some(sa) if sa.secrets.as_ref().is_some_and(|s| !s.is_empty()) => Ok(()),
                other => Err(format!("{:?}", other.map(|sa| sa.secrets))),
            })
        },
    )
    .await?;
    create_pod(&admin, &ns, burner(&env, "steady", 500, 64, 600)).await?;
    let steady = running_or_why(&admin, &mut scorer, &ns, "steady").await?;
    assert_eq!(node_of(&steady).as_deref(), Some(env.node.as_str()));
    let evs = events(&admin, &ns).await?;
    let by = evs
        .iter()
        .find(|e| e.reason.as_deref() == Some("Scheduled"))
        .and_then(|e| {
            e.reporting_component
                .clone()
                .or(e.source.as_ref().and_then(|s| s.component.clone()))
        })
        .unwrap_or_default();
    assert!(
        by.contains("loadstar"),
        "the pod was scheduled by {by:?}, not Loadstar"
    );
    eprintln!("bound by {by} and Running on {}", env.node);

    // 3a. The agent's per-pod CPU and memory against the pod's own cgroup.
    let uid = uid_of(&steady);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (c0, t_c0) = (cgroup_cpu_seconds(&uid)?, unix_now());
    let mut samples: Vec<(f64, f64, u64)> = Vec::new();
    while samples.len() < 10 {
        let n = scorer.node(&env.node).await?;
        let t = report_time(&n);
        if let Some(p) = pod_usage(&n, &uid)
            && t > t_c0 + 1.0
            && samples.last().is_none_or(|s| s.0 < t)
        {
            samples.push((t, p.cpu_cores, p.memory_working_set_bytes));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let (c1, t_c1) = (cgroup_cpu_seconds(&uid)?, unix_now());
    let ws = cgroup_working_set(&uid)?;
    let agent_cpu = samples.iter().map(|s| s.1).sum::<f64>() / samples.len() as f64;
    let cgroup_cpu = (c1 - c0) / (t_c1 - t_c0);
    let agent_ws = samples.last().map(|s| s.2).unwrap_or(0) as f64;
    eprintln!(
        "FIGURE burner pod: agent {agent_cpu:.4} cores vs cgroup {cgroup_cpu:.4} cores; \
         working set agent {:.1} MiB vs cgroup {:.1} MiB",
        agent_ws / 1048576.0,
        ws as f64 / 1048576.0
    );
    assert!(
        (agent_cpu - cgroup_cpu).abs() <= 0.05 * cgroup_cpu,
        "per-pod CPU differs by more than 5 %: agent {agent_cpu}, cgroup {cgroup_cpu}"
    );
    assert!(
        (agent_ws - ws as f64).abs() <= 0.05 * ws as f64,
        "per-pod working set differs by more than 5 %: agent {agent_ws}, cgroup {ws}"
    );

    // 3b. The node's CPU rises in GetNode within 2 sampling intervals of a burn starting.
    let interval = rep.sample_interval_seconds;
    let mut base = Vec::new();
    while base.len() < 3 {
        let n = scorer.node(&env.node).await?;
        if base
            .last()
            .is_none_or(|b: &(f64, f64)| b.0 < report_time(&n))
            && let Some(c) = cpu_latest(&n)
        {
            base.push((report_time(&n), c));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let baseline = base.iter().map(|b| b.1).fold(0.0, f64::max);
    // Requests little: the node's 2 cores are mostly requested already (scorer, steady).
    create_pod(&admin, &ns, burner(&env, "spike", 1000, 0, 200)).await?;
    let spike = running_or_why(&admin, &mut scorer, &ns, "spike").await?;
    let spike_uid = uid_of(&spike);
    // When the burn started: the first time its cgroup has used 50 ms of CPU.
    let burn_start = loop {
        if cgroup_cpu_seconds(&spike_uid).unwrap_or(0.0) > 0.05 {
            break unix_now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let rise = (1.0 - baseline).min(0.5) / 2.0;
    let seen = loop {
        let n = scorer.node(&env.node).await?;
        if report_time(&n) > burn_start && cpu_latest(&n).is_some_and(|c| c >= baseline + rise) {
            break report_time(&n);
        }
        if unix_now() - burn_start > 10.0 * interval {
            bail!("node CPU never rose by {rise:.2} over {baseline:.2} after the burn started");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!(
        "FIGURE node CPU rose (baseline {baseline:.2}, +{rise:.2}) in a report sampled {:.2} s \
         after the burn started (interval {interval} s)",
        seen - burn_start
    );
    assert!(
        seen - burn_start <= 2.0 * interval + 0.1,
        "the rise showed {:.2} s after the burn started, more than 2 intervals",
        seen - burn_start
    );
    Api::<Pod>::namespaced(admin.clone(), &ns)
        .delete("spike", &DeleteParams::default())
        .await?;

    // 4. The agent pod's own footprint over 30 s, beside a peer measured in the same window:
    // the same release binary run as a host process with the same interval, streaming to a
    // stub scorer (bench/agent-footprint.sh's default mode). A fixed figure from bench/README.md would
    // compare a loaded CI machine with a quiet one; the peer shares the load. CPU comes from
    // the pod's cgroup and from the peer's threads' run time; memory as bench/README.md's
    // "Agent" section measures the host process (VmHWM and VmRSS from /proc/<pid>/status),
    // for the agent's process found through the pod's cgroup.procs. The cgroup's own memory
    // figures are recorded beside them: they are lower, because the cgroup charges the
    // binary's page-cache pages to whoever read them first (often containerd's image
    // import), not to the agent.
    let auid = uid_of(&agent);
    let apid = agent_pid(&auid)?;
    let mut peer = HostAgent::start()?;
    tokio::time::sleep(Duration::from_secs(3)).await; // the peer's start-up, not measured
    peer.check_running()?;
    let (a0, p0, ta0) = (cgroup_cpu_seconds(&auid)?, peer.cpu_seconds()?, unix_now());
    tokio::time::sleep(Duration::from_secs(30)).await;
    let (a1, p1, ta1) = (cgroup_cpu_seconds(&auid)?, peer.cpu_seconds()?, unix_now());
    peer.check_running()?;
    let mcpu = (a1 - a0) / (ta1 - ta0) * 1000.0;
    let peer_mcpu = (p1 - p0) / (ta1 - ta0) * 1000.0;
    let mib = |b: u64| b as f64 / 1048576.0;
    let hwm = mib(proc_status_bytes(apid, "VmHWM")?);
    let vm_rss = mib(proc_status_bytes(apid, "VmRSS")?);
    let peer_hwm = mib(proc_status_bytes(peer.pid(), "VmHWM")?);
    let ws = mib(cgroup_working_set(&auid)?);
    let cg_rss = mib(cgroup_memory_stat(&auid, "rss")? + cgroup_memory_stat(&auid, "mapped_file")?);
    drop(peer);
    eprintln!(
        "FIGURE agent pod footprint: {mcpu:.2} mCPU (cgroup); process {apid}: peak RSS \
         (VmHWM) {hwm:.1} MiB, RSS (VmRSS) {vm_rss:.1} MiB; cgroup: {ws:.1} MiB working set, \
         {cg_rss:.1} MiB anon + mapped file; host-process peer in the same 30 s: \
         {peer_mcpu:.2} mCPU, peak RSS {peer_hwm:.1} MiB (ratio {:.2})",
        mcpu / peer_mcpu
    );
    assert!(
        (peer_mcpu / 2.0..=peer_mcpu * 2.0).contains(&mcpu),
        "agent pod CPU {mcpu:.2} mCPU is not within 2x of the host process's {peer_mcpu:.2} \
         mCPU measured in the same 30 s"
    );
    for (what, v) in [("peak RSS (VmHWM)", hwm), ("RSS (VmRSS)", vm_rss)] {
        assert!(
            (peer_hwm / 2.0..=peer_hwm * 2.0).contains(&v),
            "agent pod {what} {v:.1} MiB is not within 2x of the host process's peak \
             {peer_hwm:.1} MiB"
        );
    }

    // 5. Delete the agent pod: recreated, the node goes stale, then reports again. While it
    // is stale the scorer must react per the default profile's stale policy (`fallback`):
    // the node stays a candidate scored from requests, and Loadstar keeps binding to it.
    let old = agent.metadata.name.clone().context("agent pod name")?;
    let td = Instant::now();
    Api::<Pod>::namespaced(admin.clone(), NS)
        .delete(&old, &DeleteParams::default())
        .await?;
    let mut stale_at = None;
    let mut reaction = None;
    let mut recreated_at = None;
    let back_at = loop {
        if recreated_at.is_none()
            && let Ok(Ok(p)) = agent_pod(&admin).await
            && p.metadata.name.as_deref() != Some(old.as_str())
        {
            recreated_at = Some(td.elapsed());
        }
        let n = scorer.node(&env.node).await?;
        if stale_at.is_none() && n.stale {
            stale_at = Some(td.elapsed());
            // Score: feasible, marked stale, LoadVariationRiskBalancing from requests.
            let (lvrb, want) = check_stale_reaction(&mut scorer, &env.node).await?;
            // The scheduler: a pod created now is bound to the stale node, and its decision
            // record shows the node stale.
            let created = Instant::now();
            create_pod(&admin, &ns, burner(&env, "while-stale", 0, 0, 50)).await?;
            let pods_api = Api::<Pod>::namespaced(admin.clone(), &ns);
            let bound_to = eventually(
                "the pod created while the node is stale bound",
                Duration::from_secs(30),
                || async {
                    let p = pods_api.get("while-stale").await?;
                    Ok(node_of(&p).ok_or_else(|| "not bound".to_string()))
                },
            )
            .await?;
            let bind = created.elapsed();
            assert_eq!(
                bound_to, env.node,
                "the pod created while stale went elsewhere"
            );
            let rec = scorer.explain(&ns, "while-stale").await?;
            let ranked = rec
                .ranked
                .iter()
                .find(|r| r.node_name == env.node)
                .with_context(|| format!("decision without {}: {rec:?}", env.node))?;
            assert!(
                ranked.stale,
                "the decision for the pod created while stale does not mark {} stale: {rec:?}",
                env.node
            );
            assert!(
                scorer.node(&env.node).await?.stale,
                "the node turned fresh before the stale checks ended"
            );
            reaction = Some((lvrb, want, bind, rec.outcome.clone(), td.elapsed()));
        }
        if stale_at.is_some() && !n.stale && recreated_at.is_some() {
            break td.elapsed();
        }
        if td.elapsed() > Duration::from_secs(180) {
            bail!("after deleting the agent pod: stale {stale_at:?}, recreated {recreated_at:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (lvrb, want, bind, outcome, checked_at) =
        reaction.context("the node was never seen stale")?;
    // Fresh again: Score judges the node on its measured load again. It is ranked and not
    // marked stale, or — when this shared machine is busy — refused by a load filter, which
    // under `fallback` never happens to a stale node.
    let resp = scorer.score(&env.node, "100m", "64Mi").await?;
    let fresh = match resp.ranked.iter().find(|r| r.node_name == env.node) {
        Some(r) => {
            assert!(!r.stale, "Score still marks the fresh node stale: {r:?}");
            format!("ranked, not stale (total {:.1})", r.total_score)
        }
        None => {
            let f = resp
                .filtered
                .iter()
                .find(|f| f.node_name == env.node)
                .with_context(|| format!("fresh node neither ranked nor filtered: {resp:?}"))?;
            assert!(
                ["UsageThreshold", "EvictionPressure"].contains(&f.plugin.as_str()),
                "the fresh node refused by {} ({}), not by a load filter",
                f.plugin,
                f.reason
            );
            format!("refused by {} on its measured load: {}", f.plugin, f.reason)
        }
    };
    let ds = Api::<DaemonSet>::namespaced(admin.clone(), NS)
        .get("loadstar-agent")
        .await?;
    eprintln!(
        "FIGURE agent pod deleted: node stale after {:.1} s, new agent pod Ready after {:.1} s, \
         node fresh again after {:.1} s (DaemonSet ready {:?})",
        stale_at.unwrap_or_default().as_secs_f64(),
        recreated_at.unwrap_or_default().as_secs_f64(),
        back_at.as_secs_f64(),
        ds.status.map(|s| s.number_ready)
    );
    eprintln!(
        "FIGURE while stale (checks done {:.1} s after the delete), default profile `fallback`: \
         Score ranks the node, marked stale, LoadVariationRiskBalancing {lvrb} (from requests: \
         {want}); a pod created then was bound to it in {:.2} s ({outcome}, decision marks it \
         stale); fresh again: {fresh}",
        checked_at.as_secs_f64(),
        bind.as_secs_f64()
    );
    delete_pods_now(&admin, &ns).await;
    Ok(())
}
