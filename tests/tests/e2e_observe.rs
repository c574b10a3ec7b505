//! Observability end to end: a real Prometheus 2.42 scrapes a live scorer scheduling pods on
//! the e2e API server and two real agents, with the rules Loadstar ships loaded. Every panel
//! of the Grafana dashboard must return data, every rule must evaluate, and `promtool check
//! metrics` must accept each process's scrape; `kubectl-loadstar` explains the pods the
//! scheduler placed, and `promtool test rules` runs the rules' unit tests.
//!
//! Run by `tests/e2e/run.sh` (it exports the binaries' paths); needs Debian's `prometheus`.
#![allow(missing_docs)]

mod e2e_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use e2e_support::faults::http_get;
use e2e_support::*;
use futures::StreamExt;
use loadstar_proto::pb;
use loadstar_proto::pb::ingest_client::IngestClient;
use serde_json::{Value, json};

const RUNNER: &str = "tests/e2e/run.sh";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn tool(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default))
}

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(program: &Path, args: &[String], log: &Path) -> Result<Proc> {
    let out = std::fs::File::create(log)?;
    let child = Command::new(program)
        .args(args)
        .env("NO_COLOR", "1")
        .stdout(out.try_clone()?)
        .stderr(out)
        .stdin(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", program.display()))?;
    Ok(Proc(child))
}

/// `promtool ARGS…` with `stdin`; its output, or an error with it.
fn promtool(args: &[&str], stdin: Option<&str>) -> Result<String> {
    use std::io::Write as _;
    let mut child = Command::new(tool("LOADSTAR_E2E_PROMTOOL", "/usr/bin/promtool"))
        .args(args)
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting promtool (Debian: apt-get install prometheus)")?;
    if let Some(mut s) = child.stdin.take() {
        s.write_all(stdin.unwrap_or_default().as_bytes())?;
    }
    let out = child.wait_with_output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(out.status.success(), "promtool {args:?} failed:\n{text}");
    Ok(text)
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Prometheus' answer to an instant query: the result vector.
async fn query(prom: &str, q: &str) -> Result<Vec<Value>> {
    let body = http_get(&format!("http://{prom}/api/v1/query?query={}", encode(q))).await?;
    let v: Value = serde_json::from_str(&body).with_context(|| format!("not JSON: {body}"))?;
    ensure!(v["status"] == "success", "query {q:?}: {v}");
    Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
}

/// Every PromQL expression of the dashboard, with its panel's title, its variables bound as
/// a viewer's default would bind them.
fn dashboard_queries() -> Result<Vec<(String, String)>> {
    let path = root().join("deploy/helm/loadstar/files/grafana-dashboard.json");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    let mut out = Vec::new();
    for p in d["panels"].as_array().context("panels")? {
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = t["expr"].as_str().context("expr")?;
            let bound = expr
                .replace("$__rate_interval", "30s")
                .replace("$resource", "cpu");
            ensure!(!bound.contains('$'), "unbound variable in {expr:?}");
            out.push((p["title"].as_str().unwrap_or("?").to_string(), bound));
        }
    }
    ensure!(out.len() >= 20, "the dashboard has {} queries", out.len());
    Ok(out)
}

#[tokio::test]
#[ignore = "needs the e2e cluster and Debian's prometheus: run by tests/e2e/run.sh"]
async fn prometheus_scrapes_a_live_scheduler_and_every_panel_and_rule_has_data() -> Result<()> {
    let Some(env) = env_or_skip() else {
        return Ok(());
    };
    // The rules are valid and their unit tests pass.
    promtool(
        &[
            "check",
            "rules",
            "deploy/helm/loadstar/files/prometheus-rules.yaml",
        ],
        None,
    )?;
    promtool(
        &["test", "rules", "deploy/prometheus/rules.test.yaml"],
        None,
    )?;

    let agent_bin = PathBuf::from(required("LOADSTAR_E2E_AGENT_BIN", RUNNER)?);
    let cli_bin = PathBuf::from(required("LOADSTAR_E2E_CLI_BIN", RUNNER)?);
    let admin = env.admin().await?;
    let ns = namespace(&admin, "observe").await?;
    let tag = format!("{:04x}", rand_u32() & 0xffff);
    let grpc: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;

    // Two real agents, started before the scorer so that their first connections fail and
    // they reconnect; the second reads a `/proc` whose `diskstats` is malformed, so its disk
    // collector fails on every sample (and its other collectors carry on).
    let bad_proc = tempfile::tempdir()?;
    for f in ["stat", "meminfo", "cpuinfo"] {
        std::fs::copy(format!("/proc/{f}"), bad_proc.path().join(f))?;
    }
    std::fs::write(
        bad_proc.path().join("diskstats"),
        "   8       0 sda not numbers\n",
    )?;
    let bad_proc_arg = format!("--proc-root={}", bad_proc.path().display());
    let mut agents = Vec::new();
    let mut agent_targets = Vec::new();
    for (i, extra) in [(0, None), (1, Some(bad_proc_arg.as_str()))] {
        let node = format!("obs-{tag}-agent-{i}");
        let metrics = format!("127.0.0.1:{}", free_port()?);
        let mut args = vec![
            format!("--scorer=http://{grpc}"),
            format!("--node-name={node}"),
            format!("--metrics-addr={metrics}"),
            "--backoff-initial=0.2".into(),
            "--backoff-max=1".into(),
        ];
        args.extend(extra.map(String::from));
        agents.push(spawn(
            &agent_bin,
            &args,
            &env.logs.join(format!("observe-agent-{i}.log")),
        )?);
        agent_targets.push((node, metrics));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let scorer = Scorer::start_at(
        &env,
        &env.scorer_kubeconfig,
        &format!("observe-{tag}"),
        &format!("observe-{tag}"),
        Some(grpc),
        &["--insecure-allow-unauthenticated"],
    )
    .await?;

    // Kubernetes nodes with simulated agents, and pods for the scheduler: six that fit, one
    // that fits nowhere (unschedulable, preemption tried), one for the first pod's claim.
    let nodes: Vec<String> = (0..3).map(|i| format!("obs-{tag}-node-{i}")).collect();
    for n in &nodes {
        create_node(&admin, n, "4", "8Gi").await?;
    }
    let sims: Vec<(String, _)> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), load(0.2 + 0.25 * i as f64, 0.3)))
        .collect();
    let _sims = Agents::start(&[scorer.endpoint()], &sims, Duration::from_secs(1)).await?;
    reports_visible(&scorer, &nodes).await?;
    let mut pods = Vec::new();
    for i in 0..6 {
        pods.push(pod(&format!("web-{i}"), Some("loadstar"), "250m", "128Mi"));
    }
    pods.push(pod("giant", Some("loadstar"), "64", "1Gi"));
    create_pods(&admin, &ns, pods).await?;
    let bound = wait_bound(&admin, &ns, 6, Duration::from_secs(60)).await?;
    ensure!(bound.len() >= 6, "bound: {bound:?}");

    // One report the scorer rejects (an invalid node name).
    {
        let mut c = IngestClient::connect(scorer.endpoint()).await?;
        let cap = loadstar_testkit::agent::capacity(8, 32);
        let r = loadstar_testkit::agent::report("Not A Node!", "observe", 1, &cap, load(0.1, 0.1));
        let acks: Vec<pb::ReportAck> = c
            .report(tokio_stream::iter(vec![r]))
            .await?
            .into_inner()
            .filter_map(|a| async move { a.ok() })
            .collect()
            .await;
        ensure!(
            acks.iter().any(|a| !a.accepted),
            "the invalid report was not rejected: {acks:?}"
        );
    }

    // A real Prometheus over the scorer and both agents, with Loadstar's rules.
    let dir = tempfile::tempdir()?;
    let prom = format!("127.0.0.1:{}", free_port()?);
    let rules = root().join("deploy/helm/loadstar/files/prometheus-rules.yaml");
    let config = json!({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [rules],
        "scrape_configs": [
            {"job_name": "loadstar-scorer", "static_configs": [{"targets": [scorer.http.to_string()]}]},
            {"job_name": "loadstar-agent", "static_configs": agent_targets.iter().map(|(node, addr)| json!({
                "targets": [addr], "labels": {"node": node}
            })).collect::<Vec<_>>()},
        ],
    });
    // JSON is YAML.
    let config_path = dir.path().join("prometheus.yml");
    std::fs::write(&config_path, config.to_string())?;
    promtool(
        &["check", "config", config_path.to_str().unwrap_or_default()],
        None,
    )?;
    let _prometheus = spawn(
        &tool("LOADSTAR_E2E_PROMETHEUS", "/usr/bin/prometheus"),
        &[
            format!("--config.file={}", config_path.display()),
            format!("--storage.tsdb.path={}", dir.path().join("data").display()),
            format!("--web.listen-address={prom}"),
            "--log.level=warn".into(),
        ],
        &env.logs.join("observe-prometheus.log"),
    )?;
    let ups = eventually("every target up", Duration::from_secs(60), || async {
        let up = query(&prom, "up").await.unwrap_or_default();
        let healthy = up.iter().filter(|s| s["value"][1] == "1").count();
        Ok(if up.len() == 3 && healthy == 3 {
            Ok(up)
        } else {
            Err(format!("{up:?}"))
        })
    })
    .await?;
    ensure!(ups.len() == 3);

    // Each process's scrape passes promtool's lint (the text format a plain GET gets).
    for (what, addr) in std::iter::once(("scorer".to_string(), scorer.http.to_string())).chain(
        agent_targets
            .iter()
            .map(|(n, a)| (format!("agent {n}"), a.clone())),
    ) {
        let text = http_get(&format!("http://{addr}/metrics")).await?;
        ensure!(text.contains("# TYPE"), "{what}: no metrics: {text}");
        let lint = promtool(&["check", "metrics"], Some(&text))
            .with_context(|| format!("promtool check metrics on the {what}'s scrape"))?;
        ensure!(lint.trim().is_empty(), "{what}: {lint}");
    }

    // Rates need a few scrapes in their window; then every panel must show data.
    let queries = dashboard_queries()?;
    let empty = eventually(
        "every dashboard query returning data",
        Duration::from_secs(90),
        || {
            let queries = queries.clone();
            let prom = prom.clone();
            async move {
                let mut empty = Vec::new();
                for (title, q) in &queries {
                    if query(&prom, q).await?.is_empty() {
                        empty.push(format!("{title}: {q}"));
                    }
                }
                Ok(if empty.is_empty() {
                    Ok(())
                } else {
                    Err(empty.join("\n"))
                })
            }
        },
    )
    .await;
    if let Err(e) = empty {
        bail!("dashboard panels without data:\n{e}");
    }
    println!("{} dashboard queries returned data", queries.len());

    // Every rule evaluates without error (health `unknown` until its first evaluation);
    // recording rules produce series once their windows hold two scrapes.
    let health = eventually("every rule evaluated", Duration::from_secs(60), || {
        let prom = prom.clone();
        async move {
            let body = http_get(&format!("http://{prom}/api/v1/rules")).await?;
            let rules: Value = serde_json::from_str(&body)?;
            let mut health = BTreeMap::new();
            for g in rules["data"]["groups"].as_array().into_iter().flatten() {
                for r in g["rules"].as_array().into_iter().flatten() {
                    health.insert(
                        r["name"].as_str().unwrap_or("?").to_string(),
                        r["health"].as_str().unwrap_or("?").to_string(),
                    );
                }
            }
            Ok(
                if health.len() == 15 && health.values().all(|h| h == "ok") {
                    Ok(health)
                } else {
                    Err(format!("{health:?}"))
                },
            )
        }
    })
    .await?;
    println!("{} rules evaluated", health.len());
    for rec in [
        "loadstar:schedule_attempts:rate5m",
        "loadstar:schedule_failures:ratio5m",
        "loadstar:reports_accepted:rate5m",
        "loadstar:node_utilization:avg",
        "loadstar:node_utilization:max",
        "loadstar:stale_nodes:ratio",
        "loadstar:scheduling_latency_seconds:p99_5m",
    ] {
        eventually(rec, Duration::from_secs(60), || {
            let prom = prom.clone();
            async move {
                Ok(if query(&prom, rec).await?.is_empty() {
                    Err("no series".to_string())
                } else {
                    Ok(())
                })
            }
        })
        .await?;
    }
    // One leader, so LoadstarNoLeader is quiet; the collector failure is pending.
    let alerts = eventually(
        "the collector alert pending",
        Duration::from_secs(60),
        || {
            let prom = prom.clone();
            async move {
                let alerts = query(&prom, "ALERTS").await?;
                Ok(
                    if alerts.iter().any(|a| {
                        a["metric"]["alertname"] == "LoadstarAgentCollectorErrors"
                            && a["metric"]["collector"] == "disk"
                    }) {
                        Ok(alerts)
                    } else {
                        Err(format!("{alerts:?}"))
                    },
                )
            }
        },
    )
    .await?;
    ensure!(
        !alerts
            .iter()
            .any(|a| a["metric"]["alertname"] == "LoadstarNoLeader"),
        "{alerts:?}"
    );

    // The operator's CLI explains what the scheduler did.
    let cli = |args: Vec<String>| {
        let out = Command::new(&cli_bin)
            .arg(format!("--scorer={grpc}"))
            .args(&args)
            .output();
        async move {
            let out = out?;
            ensure!(
                out.status.success(),
                "kubectl-loadstar {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        }
    };
    let web = cli(vec!["explain".into(), format!("{ns}/web-0")]).await?;
    ensure!(web.contains("by Loadstar's scheduler"), "{web}");
    let placed = bound.get("web-0").context("web-0 bound")?.clone();
    ensure!(web.contains(&format!("bound to {placed}")), "{web}");
    let giant = cli(vec!["explain".into(), format!("{ns}/giant")]).await?;
    ensure!(giant.contains("unschedulable"), "{giant}");
    ensure!(giant.contains("Insufficient cpu"), "{giant}");
    let top = cli(vec!["top".into(), "--filter".into(), format!("obs-{tag}")]).await?;
    for n in nodes.iter().chain(agent_targets.iter().map(|(n, _)| n)) {
        ensure!(top.contains(n.as_str()), "{n} missing from top:\n{top}");
    }
    // And the web view lists the same decisions.
    let decisions = http_get(&format!("http://{}/ui/api/decisions", scorer.http)).await?;
    ensure!(
        decisions.contains(&format!("\"{ns}/giant\"")),
        "{decisions}"
    );
    drop(agents);
    delete_nodes(&admin, &nodes).await;
    Ok(())
}
