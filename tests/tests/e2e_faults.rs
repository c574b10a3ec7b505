//! Fault scenarios on the real control plane (issue #17), each printing its figures as
//! `[faults] …` lines: the leader killed with SIGKILL mid-burst, kube-apiserver killed and
//! restarted mid-burst, etcd killed and restarted mid-burst, watches expired by an etcd
//! compaction (then an API server restart, so that every watch must resume from a
//! `resourceVersion` that no longer exists), agents partitioned from the scorer and healed,
//! and the scorer killed and replaced under connected agents.
//!
//! The burst scenarios create their nodes and pending pods first, then start the scorer(s)
//! and simulated agents, so the burst is the scheduler's alone and no pod creation races the
//! fault. What each checks: every pod ends bound (0 lost), no pod has more than one
//! `Scheduled` Event, and where a pod has one it names the node the pod is bound to (0 bound
//! twice; the API server refuses a second binding of a pod, so a double bind would show as an
//! Event naming another node, or as a `conflict` in the survivors' bind metrics, reported).
//!
//! The agent scenarios run the agent's own reporting code ([`Herd`]: reconnects with its
//! backoff and jitter) for many nodes in this process. The partition is an `iptables` rule
//! (`raw` table, so root) dropping every packet the agents send to the scorer's port on
//! 127.0.0.2, while the test reads the scorer on 127.0.0.1: open streams stall until HTTP/2
//! keepalive gives up (10 s + 5 s), new connections time out.
//!
//! Sizes: `LOADSTAR_FAULTS_NODES` (default 200), `LOADSTAR_FAULTS_PODS` (default 1000),
//! `LOADSTAR_FAULTS_AGENTS` (default 500) — the CI size; `tests/e2e/faults/run.sh --full`
//! runs 1 000 nodes, 5 000 pods and 5 000 agents. `LOADSTAR_FAULTS_APISERVER_DOWN` (seconds,
//! default 10) is how long the API server stays down, `LOADSTAR_FAULTS_PARTITION` (seconds,
//! default 20) how long the agents are cut off. The scenarios run one at a time (they stop
//! the shared control plane). Run by `tests/e2e/run.sh` (suite `e2e_faults`), which sets
//! `LOADSTAR_E2E_CLUSTER_DIR`.
mod e2e_support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use e2e_support::faults::*;
use e2e_support::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

/// The scheduler name of the default profile.
const SCHEDULER: &str = "loadstar";
const MI: &str = "64Mi";

/// One scenario at a time: they kill the control plane every test shares.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn size(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The control plane's directory and the fault script.
struct ControlPlane {
    dir: PathBuf,
}

impl ControlPlane {
    fn from_env() -> Result<ControlPlane> {
        Ok(ControlPlane {
            dir: required("LOADSTAR_E2E_CLUSTER_DIR", "tests/e2e/run.sh")?.into(),
        })
    }

    /// Runs `tests/e2e/faults/control-plane.sh DIR args…`; its stdout.
    async fn run(&self, args: &[&str]) -> Result<String> {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/e2e/faults/control-plane.sh");
        let (dir, args_owned) = (
            self.dir.clone(),
            args.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        );
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new("bash")
                .arg(script)
                .arg(dir)
                .args(args_owned)
                .output()
        })
        .await?
        .context("running control-plane.sh")?;
        ensure!(
            out.status.success(),
            "control-plane.sh {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    async fn kill(&self, what: &str) -> Result<()> {
        self.run(&["kill", what]).await.map(|_| ())
    }

    async fn start(&self, what: &str) -> Result<()> {
        self.run(&["start", what]).await.map(|_| ())
    }
}

/// A burst's nodes and pending pods, created before any scheduler runs.
struct Burst {
    ns: String,
    nodes: Vec<String>,
    pods: usize,
    loads: Vec<(String, loadstar_testkit::agent::SyntheticLoad)>,
}

/// Removes what an earlier scenario that failed left behind: its nodes, and its pending
/// pods, which the next scenario's scorers would otherwise schedule.
async fn purge_leftovers(client: &kube::Client) -> Result<()> {
    use k8s_openapi::api::core::v1::{Namespace, Node};
    use kube::ResourceExt;
    use kube::api::{DeleteParams, ListParams};
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for n in namespaces.list(&ListParams::default()).await? {
        let name = n.name_any();
        if name.starts_with("faults-") && n.metadata.deletion_timestamp.is_none() {
            delete_pods_now(client, &name).await;
            let _ = namespaces.delete(&name, &DeleteParams::default()).await;
        }
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let stale: Vec<String> = nodes
        .list(&ListParams::default())
        .await?
        .iter()
        .map(|n| n.name_any())
        .filter(|n| n.starts_with("faults-"))
        .collect();
    delete_nodes(client, &stale).await;
    Ok(())
}

impl Burst {
    async fn create(client: &kube::Client, prefix: &str) -> Result<Burst> {
        purge_leftovers(client).await?;
        let node_count = size("LOADSTAR_FAULTS_NODES", 200);
        let pods = size("LOADSTAR_FAULTS_PODS", 1000);
        let ns = namespace(client, prefix).await?;
        let nodes: Vec<String> = (0..node_count).map(|i| format!("{ns}-n{i}")).collect();
        futures::future::try_join_all(nodes.chunks(50).map(|chunk| async move {
            for n in chunk {
                create_node(client, n, "16", "64Gi").await?;
            }
            anyhow::Ok(())
        }))
        .await?;
        create_pods(
            client,
            &ns,
            (0..pods)
                .map(|i| pod(&format!("p{i}"), Some(SCHEDULER), "100m", MI))
                .collect(),
        )
        .await?;
        let loads = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), load(0.1 + 0.5 * (i % 10) as f64 / 10.0, 0.3)))
            .collect();
        Ok(Burst {
            ns,
            nodes,
            pods,
            loads,
        })
    }

    /// Pods bound now (a list that fails, e.g. while the API server is down, counts as
    /// `None`).
    async fn bound(&self, client: &kube::Client) -> Option<usize> {
        let ps = pods(client, &self.ns).await.ok()?;
        Some(ps.iter().filter(|p| node_of(p).is_some()).count())
    }

    /// Waits until at least `share` of the pods are bound; the time it took.
    async fn until_share(&self, client: &kube::Client, share: f64) -> Result<Duration> {
        let started = Instant::now();
        let want = (self.pods as f64 * share).ceil() as usize;
        eventually(
            &format!("{want} pods bound"),
            Duration::from_secs(600),
            || async {
                Ok(match self.bound(client).await {
                    Some(n) if n >= want => Ok(()),
                    other => Err(format!("{other:?} bound")),
                })
            },
        )
        .await?;
        Ok(started.elapsed())
    }

    /// Every pod bound (0 lost) and at most one `Scheduled` Event per pod, naming its node.
    async fn check_exactly_once(&self, client: &kube::Client, limit: Duration) -> Result<Verdict> {
        let placed = wait_bound(client, &self.ns, self.pods, limit).await?;
        // Events are written after the binding, asynchronously: give them a moment.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let mut scheduled: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut failed = 0;
        for e in events(client, &self.ns).await? {
            let pod = e.involved_object.name.clone().unwrap_or_default();
            match e.reason.as_deref() {
                Some("Scheduled") => {
                    let msg = e.message.clone().unwrap_or_default();
                    let node = msg.rsplit(" to ").next().unwrap_or_default().to_string();
                    for _ in 0..e.count.unwrap_or(1).max(1) {
                        scheduled.entry(pod.clone()).or_default().push(node.clone());
                    }
                }
                Some("FailedScheduling") => failed += e.count.unwrap_or(1).max(1) as usize,
                _ => {}
            }
        }
        let mut twice = Vec::new();
        let mut without_event = 0;
        for (pod, node) in &placed {
            match scheduled.get(pod).map(Vec::as_slice) {
                None => without_event += 1,
                Some([n]) if n == node => {}
                Some(other) => twice.push(format!("{pod} on {node}, Events {other:?}")),
            }
        }
        ensure!(
            twice.is_empty(),
            "{} pods bound twice or elsewhere than their Event says: {:?}",
            twice.len(),
            &twice[..twice.len().min(10)]
        );
        Ok(Verdict {
            bound: placed.len(),
            without_event,
            failed_events: failed,
        })
    }

    async fn clean_up(&self, client: &kube::Client) {
        delete_pods_now(client, &self.ns).await;
        delete_nodes(client, &self.nodes).await;
    }
}

/// What [`Burst::check_exactly_once`] found.
#[derive(Debug)]
struct Verdict {
    bound: usize,
    /// Bound pods without a `Scheduled` Event (a leader killed between binding and Event).
    without_event: usize,
    /// `FailedScheduling` Events in the namespace.
    failed_events: usize,
}

const BINDS: &str = "loadstar_scorer_binds_total";

/// Full lists of pods the scorer's pods watch has made (the first included).
async fn pod_lists(s: &Scorer) -> f64 {
    metric(s, "loadstar_scorer_watch_relists_total", "watch=\"pods\"")
        .await
        .unwrap_or(0.0)
}

/// Runs a burst with two replicas under leader election and no fault; its duration from
/// the first bind to the last.
async fn uninterrupted(env: &E2eEnv, client: &kube::Client) -> Result<Duration> {
    let burst = Burst::create(client, "faults-base").await?;
    let lease = format!("lease-faults-base-{:x}", rand_u32());
    let a = Scorer::start(
        env,
        "base-a",
        &lease,
        &["--kube-api-qps=1000", "--kube-api-burst=1000"],
    )
    .await?;
    let b = Scorer::start(
        env,
        "base-b",
        &lease,
        &["--kube-api-qps=1000", "--kube-api-burst=1000"],
    )
    .await?;
    let _agents = Agents::start(
        &[a.endpoint(), b.endpoint()],
        &burst.loads,
        Duration::from_secs(1),
    )
    .await?;
    burst.until_share(client, 1.0 / burst.pods as f64).await?;
    let first = Instant::now();
    burst.until_share(client, 1.0).await?;
    let took = first.elapsed();
    burst.clean_up(client).await;
    Ok(took)
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn leader_killed_mid_burst_loses_no_pod_and_binds_none_twice() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let _serial = SERIAL.lock().await;
    let client = env.admin().await?;
    let base = uninterrupted(&env, &client).await?;
    let burst = Burst::create(&client, "faults-leader").await?;
    let lease = format!("lease-faults-{:x}", rand_u32());
    let flags = ["--kube-api-qps=1000", "--kube-api-burst=1000"];
    let mut a = Scorer::start(&env, "leader-a", &lease, &flags).await?;
    let mut b = Scorer::start(&env, "leader-b", &lease, &flags).await?;
    let _agents = Agents::start(
        &[a.endpoint(), b.endpoint()],
        &burst.loads,
        Duration::from_secs(1),
    )
    .await?;
    burst.until_share(&client, 1.0 / burst.pods as f64).await?;
    let first = Instant::now();
    burst.until_share(&client, 0.3).await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "loadstar");
    let holder = leases
        .get(&lease)
        .await?
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    let (leader, standby) = if holder == a.identity {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    let at_kill = burst.bound(&client).await.unwrap_or(0);
    let killed = Instant::now();
    leader.kill();
    // The standby's first binding.
    let takeover = eventually(
        "the standby's first binding",
        Duration::from_secs(60),
        || async {
            Ok(match metric(standby, BINDS, "result=\"bound\"").await {
                Some(n) if n >= 1.0 => Ok(killed.elapsed()),
                other => Err(format!("{other:?} bound by the standby")),
            })
        },
    )
    .await
    .with_context(|| standby.log_tail())?;
    let verdict = burst
        .check_exactly_once(&client, Duration::from_secs(600))
        .await
        .with_context(|| standby.log_tail())?;
    let total = first.elapsed();
    let conflicts = metric(standby, BINDS, "result=\"conflict\"")
        .await
        .unwrap_or(0.0);
    let by_standby = metric(standby, BINDS, "result=\"bound\"")
        .await
        .unwrap_or(0.0);
    let rate = |d: Duration| burst.pods as f64 / d.as_secs_f64();
    eprintln!(
        "[faults] leader killed at {at_kill}/{} bound ({:.1} s into the burst): standby {} bound its \
         first pod {:.2} s after the kill; {} bound by the standby; all {} bound, 0 twice; \
         {} without a Scheduled Event; bind conflicts at the standby {conflicts}; \
         FailedScheduling Events {}",
        burst.pods,
        (killed - first).as_secs_f64(),
        standby.identity,
        takeover.as_secs_f64(),
        by_standby,
        verdict.bound,
        verdict.without_event,
        verdict.failed_events,
    );
    eprintln!(
        "[faults] throughput: {:.0} pods/s with the kill ({:.1} s) vs {:.0} pods/s uninterrupted \
         ({:.1} s): ratio {:.2}; without the takeover gap {:.0} pods/s",
        rate(total),
        total.as_secs_f64(),
        rate(base),
        base.as_secs_f64(),
        rate(total) / rate(base),
        burst.pods as f64 / (total - takeover).as_secs_f64().max(0.001),
    );
    ensure!(verdict.bound == burst.pods);
    burst.clean_up(&client).await;
    Ok(())
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn api_server_killed_mid_burst_is_ridden_out_without_a_restart() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::from_env()?;
    let down = Duration::from_secs(size("LOADSTAR_FAULTS_APISERVER_DOWN", 10) as u64);
    let client = env.admin().await?;
    let burst = Burst::create(&client, "faults-apiserver").await?;
    let flags = ["--kube-api-qps=1000", "--kube-api-burst=1000"];
    let mut scorer = Scorer::start(&env, "apiserver-1", "lease-faults-apiserver", &flags).await?;
    let pid = scorer.pid();
    let _agents = Agents::start(&[scorer.endpoint()], &burst.loads, Duration::from_secs(1)).await?;
    burst.until_share(&client, 0.3).await?;
    let at_kill = burst.bound(&client).await.unwrap_or(0);
    cp.kill("apiserver").await?;
    let killed = Instant::now();
    tokio::time::sleep(down).await;
    let at_restart = metric(&scorer, BINDS, "").await.unwrap_or(0.0);
    let bound_before = metric(&scorer, BINDS, "result=\"bound\"")
        .await
        .unwrap_or(0.0);
    cp.start("apiserver").await?;
    let serving = Instant::now();
    let resumed = eventually(
        "a binding after the restart",
        Duration::from_secs(120),
        || async {
            Ok(match metric(&scorer, BINDS, "result=\"bound\"").await {
                Some(n) if n > bound_before + 0.5 => Ok(serving.elapsed()),
                other => Err(format!("{other:?} bound")),
            })
        },
    )
    .await
    .with_context(|| scorer.log_tail())?;
    let verdict = burst
        .check_exactly_once(&client, Duration::from_secs(600))
        .await
        .with_context(|| scorer.log_tail())?;
    ensure!(
        scorer.pid() == pid && scorer.exited().is_none(),
        "the scorer restarted"
    );
    let errors = metric(&scorer, BINDS, "result=\"error\"")
        .await
        .unwrap_or(0.0);
    let failures = metric(&scorer, "loadstar_scorer_watch_failures_total", "")
        .await
        .unwrap_or(0.0);
    eprintln!(
        "[faults] kube-apiserver killed at {at_kill}/{} bound, down {:.1} s (bind attempts by then \
         {at_restart}), serving again after {:.1} s; first binding {:.2} s after it served; all {} \
         bound, 0 twice, scorer not restarted; bind errors {errors}, watch failures {failures}, \
         FailedScheduling Events {}",
        burst.pods,
        down.as_secs_f64(),
        (serving - killed).as_secs_f64(),
        resumed.as_secs_f64(),
        verdict.bound,
        verdict.failed_events,
    );
    burst.clean_up(&client).await;
    scorer.kill();
    Ok(())
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn etcd_restart_and_compacted_watches_relist_without_binding_twice() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let _serial = SERIAL.lock().await;
    let cp = ControlPlane::from_env()?;
    let client = env.admin().await?;
    let burst = Burst::create(&client, "faults-etcd").await?;
    let flags = ["--kube-api-qps=1000", "--kube-api-burst=1000"];
    let scorer = Scorer::start(&env, "etcd-1", "lease-faults-etcd", &flags).await?;
    let _agents = Agents::start(&[scorer.endpoint()], &burst.loads, Duration::from_secs(1)).await?;
    // etcd killed mid-burst, restarted after 5 s.
    burst.until_share(&client, 0.3).await?;
    let at_kill = burst.bound(&client).await.unwrap_or(0);
    cp.kill("etcd").await?;
    let killed = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    cp.start("etcd").await?;
    let etcd_back = killed.elapsed();
    let verdict = burst
        .check_exactly_once(&client, Duration::from_secs(600))
        .await
        .with_context(|| scorer.log_tail())?;
    let done = killed.elapsed();
    eprintln!(
        "[faults] etcd killed at {at_kill}/{} bound, serving again after {:.1} s; all {} bound \
         {:.1} s after the kill, 0 twice; FailedScheduling Events {}",
        burst.pods,
        etcd_back.as_secs_f64(),
        verdict.bound,
        done.as_secs_f64(),
        verdict.failed_events,
    );

    // Watch expiry: compact etcd past every watch's resourceVersion, then restart the API
    // server so that no watch can resume from its cache: each must get 410 and list again.
    let pods_before = pod_lists(&scorer).await;
    let revision = cp.run(&["compact"]).await?;
    cp.kill("apiserver").await?;
    cp.start("apiserver").await?;
    let serving = Instant::now();
    let relisted = eventually(
        "the pods watch listing again",
        Duration::from_secs(120),
        || async {
            let now = pod_lists(&scorer).await;
            Ok(if now > pods_before {
                Ok(serving.elapsed())
            } else {
                Err(format!("{now} pod lists"))
            })
        },
    )
    .await
    .with_context(|| scorer.log_tail())?;
    let list_seconds = metric(
        &scorer,
        "loadstar_scorer_watch_relist_duration_seconds_sum",
        "watch=\"pods\"",
    )
    .await
    .unwrap_or(0.0);
    // A pod created now is bound: the scheduler works on the relisted cache.
    create_pod(
        &client,
        &burst.ns,
        pod("after", Some(SCHEDULER), "100m", MI),
    )
    .await?;
    let created = Instant::now();
    wait_bound(&client, &burst.ns, burst.pods + 1, Duration::from_secs(60))
        .await
        .with_context(|| scorer.log_tail())?;
    let to_bind = created.elapsed();
    let pods_after = pod_lists(&scorer).await;
    let verdict = Burst {
        pods: burst.pods + 1,
        ns: burst.ns.clone(),
        nodes: Vec::new(),
        loads: Vec::new(),
    }
    .check_exactly_once(&client, Duration::from_secs(30))
    .await?;
    eprintln!(
        "[faults] etcd compacted at revision {revision}, kube-apiserver restarted: the pods watch \
         listed again {:.2} s after the API server served ({} pod lists so far, all lists of pods \
         took {list_seconds:.3} s in total, {} pods in the cache); a new pod bound {:.2} s after \
         its creation; all {} bound, 0 twice",
        relisted.as_secs_f64(),
        pods_after,
        burst.pods + 1,
        to_bind.as_secs_f64(),
        verdict.bound,
    );
    ensure!(pods_after > pods_before, "no relist after the compaction");
    burst.clean_up(&client).await;
    Ok(())
}

/// A rule in the `raw` table dropping every packet to `127.0.0.2:port`: agents dialling that
/// address are cut off (connections stall, new ones time out) while the test still reaches
/// the scorer on 127.0.0.1. Removed on drop.
struct Partition {
    rule: Vec<String>,
}

impl Partition {
    fn cut(port: u16) -> Result<Partition> {
        let rule: Vec<String> = [
            "OUTPUT",
            "-d",
            "127.0.0.2",
            "-p",
            "tcp",
            "--dport",
            &port.to_string(),
            "-j",
            "DROP",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let status = std::process::Command::new("iptables")
            .args(["-t", "raw", "-I"])
            .args(&rule)
            .status()
            .context("running iptables (root and iptables are needed)")?;
        ensure!(status.success(), "iptables -I failed: {status}");
        Ok(Partition { rule })
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        let _ = std::process::Command::new("iptables")
            .args(["-t", "raw", "-D"])
            .args(&self.rule)
            .status();
    }
}

#[tokio::test]
#[ignore = "needs a real API server and root (iptables): run tests/e2e/run.sh"]
async fn agents_partitioned_go_stale_then_reconnect_with_backoff_and_jitter() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let _serial = SERIAL.lock().await;
    let n = size("LOADSTAR_FAULTS_AGENTS", 500);
    let partition = Duration::from_secs(size("LOADSTAR_FAULTS_PARTITION", 20) as u64);
    let port = free_port()?;
    let listen: std::net::SocketAddr = format!("0.0.0.0:{port}").parse()?;
    let scorer = Scorer::start_at(
        &env,
        &env.scorer_kubeconfig,
        "herd-1",
        "lease-faults-herd",
        Some(listen),
        &["--insecure-allow-unauthenticated"],
    )
    .await?;
    let names: std::collections::BTreeSet<String> =
        (0..n).map(|i| format!("herd-{i:05}")).collect();
    let list: Vec<String> = names.iter().cloned().collect();
    let started = Instant::now();
    let herd = Herd::start(&[format!("http://127.0.0.2:{port}")], &list)?;
    let cpu = CpuPeak::watch(scorer.pid().context("scorer pid")?);
    let joined = until_all_fresh(&scorer, &names, started, Duration::from_secs(120))
        .await
        .with_context(|| scorer.log_tail())?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let join_peak = cpu.peak();
    drop(cpu);
    // The partition: every node stale within 3 sampling intervals (+ one poll).
    let errors_before = herd.errors();
    let cut = Partition::cut(port)?;
    let cut_at = Instant::now();
    let all_stale = eventually("every node stale", Duration::from_secs(30), || async {
        let fresh = fresh_nodes(&scorer, &names).await?;
        Ok(if fresh.is_empty() {
            Ok(cut_at.elapsed())
        } else {
            Err(format!("{} fresh", fresh.len()))
        })
    })
    .await?;
    tokio::time::sleep(partition.saturating_sub(cut_at.elapsed())).await;
    let cpu = CpuPeak::watch(scorer.pid().context("scorer pid")?);
    let errors_cut = herd.errors() - errors_before;
    drop(cut);
    let healed = Instant::now();
    let back = until_all_fresh(&scorer, &names, healed, Duration::from_secs(180))
        .await
        .with_context(|| scorer.log_tail())?;
    // The CPU peak needs whole 1 s windows: keep sampling a little past the last node.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let heal_peak = cpu.peak();
    eprintln!(
        "[faults] {n} agents (the agent's own reporter, 1 s reports) joined: all fresh {:.1} s \
         after they started, scorer CPU peak {join_peak:.2} cores",
        joined.last().copied().unwrap_or(0.0),
    );
    eprintln!(
        "[faults] partitioned for {:.0} s (packets to the scorer dropped): every node stale \
         {:.1} s after the cut; healed: fresh again first {:.1} s, median {:.1} s, p90 {:.1} s, \
         all {:.1} s after the heal; {errors_cut} failed connections or streams during the cut \
         (each retried after the agent's backoff); scorer CPU peak {heal_peak:.2} cores; no \
         agent gave up",
        partition.as_secs_f64(),
        all_stale.as_secs_f64(),
        back[0],
        quantile(&back, 0.5),
        quantile(&back, 0.9),
        back[back.len() - 1],
    );
    ensure!(
        all_stale <= Duration::from_secs(3 + 2),
        "nodes took {all_stale:?} to turn stale (3 intervals of 1 s, plus a poll)"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs a real API server: run tests/e2e/run.sh"]
async fn scorer_restarted_under_connected_agents_has_every_node_fresh_again() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    let _serial = SERIAL.lock().await;
    let n = size("LOADSTAR_FAULTS_AGENTS", 500);
    let port = free_port()?;
    let listen: std::net::SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let start = |identity: &'static str| {
        Scorer::start_at(
            &env,
            &env.scorer_kubeconfig,
            identity,
            "lease-faults-restart",
            Some(listen),
            &["--insecure-allow-unauthenticated"],
        )
    };
    let mut first = start("restart-1").await?;
    let names: std::collections::BTreeSet<String> =
        (0..n).map(|i| format!("restart-{i:05}")).collect();
    let list: Vec<String> = names.iter().cloned().collect();
    let herd = Herd::start(&[format!("http://127.0.0.1:{port}")], &list)?;
    until_all_fresh(&first, &names, Instant::now(), Duration::from_secs(120))
        .await
        .with_context(|| first.log_tail())?;
    // A crash: SIGKILL, then the replacement on the same address.
    let errors_before = herd.errors();
    first.kill();
    let killed = Instant::now();
    let second = start("restart-2").await?;
    let serving = killed.elapsed();
    let cpu = CpuPeak::watch(second.pid().context("scorer pid")?);
    let back = until_all_fresh(&second, &names, killed, Duration::from_secs(180))
        .await
        .with_context(|| second.log_tail())?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    eprintln!(
        "[faults] scorer SIGKILLed under {n} connected agents, its replacement serving {:.1} s \
         later: nodes fresh again first {:.1} s, median {:.1} s, p90 {:.1} s, all {:.1} s after \
         the kill ({} failed connections or streams meanwhile); the new scorer's CPU peak \
         {:.2} cores; no agent gave up",
        serving.as_secs_f64(),
        back[0],
        quantile(&back, 0.5),
        quantile(&back, 0.9),
        back[back.len() - 1],
        herd.errors() - errors_before,
        cpu.peak(),
    );
    Ok(())
}
