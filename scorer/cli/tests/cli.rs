//! `kubectl-loadstar` as an operator runs it: the built binary against a real in-process
//! scorer gRPC server whose store holds agent reports; every command, every output format,
//! and the errors a typo or a dead address gives.
#![allow(missing_docs)]

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use loadstar_grpc::server::{self, ServerParts};
use loadstar_policy::config::ScorerConfig;
use loadstar_policy::profiles::Profiles;
use loadstar_store::decisions::DecisionLog;
use loadstar_store::metrics::Metrics;
use loadstar_store::{NodeStore, StoreConfig};
use loadstar_testkit::agent::{self as simagent, SyntheticLoad};

struct Scorer {
    addr: String,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn scorer(nodes: &[(&str, f64)]) -> Scorer {
    let profiles = Arc::new(Profiles::new(
        ScorerConfig::embedded_default()
            .build_profiles()
            .expect("embedded default builds"),
    ));
    let store = Arc::new(NodeStore::new(StoreConfig {
        snapshot_max_age: Duration::ZERO,
        ..StoreConfig::default()
    }));
    let capacity = simagent::capacity(8, 32);
    for (name, cpu) in nodes {
        let load = SyntheticLoad {
            cpu: *cpu,
            memory: 0.4,
            ..SyntheticLoad::default()
        };
        store
            .apply_report(
                simagent::report(name, "cli-test", 1, &capacity, load),
                std::time::Instant::now(),
            )
            .expect("report accepted");
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("addr").to_string();
    let parts = ServerParts {
        decisions: Arc::new(DecisionLog::default()),
        decoder: Some(Arc::new(loadstar_kube::convert::JsonPodDecoder)),
        ..ServerParts::new(store, profiles, Metrics::new())
    };
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = server::serve(listener, parts, async {
            let _ = rx.await;
        })
        .await;
    });
    Scorer { addr, _stop: stop }
}

/// Runs the binary off the async runtime's threads.
async fn cli(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_kubectl-loadstar"))
            .args(&args)
            .env_remove("LOADSTAR_SCORER")
            .env_remove("RUST_BACKTRACE")
            .output()
            .expect("runs")
    })
    .await
    .expect("joined")
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_lists_nodes_hottest_first_in_every_format() {
    let s = scorer(&[("cool", 0.1), ("hot", 0.9), ("warm", 0.5)]).await;
    let out = stdout(&cli(&["--scorer", &s.addr, "top"]).await);
    let names: Vec<&str> = out
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, ["hot", "warm", "cool"], "{out}");
    assert!(
        out.lines().nth(1).is_some_and(|l| l.contains("90%")),
        "{out}"
    );
    assert!(!out.contains('\u{1b}'), "no colour when not a terminal");
    let coloured = stdout(&cli(&["--scorer", &s.addr, "--color=always", "top"]).await);
    assert!(coloured.contains("\u{1b}[31m90%"), "{coloured}");
    let by_name =
        stdout(&cli(&["--scorer", &s.addr, "top", "--sort", "name", "--limit", "2"]).await);
    assert!(by_name.contains("(2 of 3 nodes shown)"), "{by_name}");
    let json = stdout(&cli(&["--scorer", &s.addr, "-o", "json", "top"]).await);
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(v[0]["node"], "hot");
    assert!(
        v[0]["usage"]["cpu"]["mean"]["60"]
            .as_f64()
            .is_some_and(|m| (m - 0.9).abs() < 1e-9)
    );
    let yaml = stdout(&cli(&["--scorer", &s.addr, "-o", "yaml", "top", "--filter", "war"]).await);
    assert!(yaml.starts_with("- node: warm\n"), "{yaml}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_watch_refreshes_until_interrupted() {
    let s = scorer(&[("n1", 0.3)]).await;
    let addr = s.addr.clone();
    let lines = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-loadstar"))
            .args([
                "--scorer",
                &addr,
                "-o",
                "json",
                "top",
                "--watch",
                "--interval",
                "0.2",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("runs");
        std::thread::sleep(Duration::from_millis(1500));
        let _ = child.kill();
        let out = child.wait_with_output().expect("output");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(String::from)
            .collect::<Vec<_>>()
    })
    .await
    .expect("joined");
    // One JSON document per refresh, one per line.
    assert!(lines.len() >= 3, "refreshes: {lines:?}");
    for l in &lines {
        let v: serde_json::Value = serde_json::from_str(l).expect("each line is JSON");
        assert_eq!(v[0]["node"], "n1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn score_then_explain_the_same_pod_and_list_profiles() {
    let s = scorer(&[("n1", 0.2), ("n2", 0.7)]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("pod.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop}\nspec:\n  containers:\n  - name: c\n    image: x\n    resources: {requests: {cpu: 500m}}\n",
    )
    .expect("write");
    let out = stdout(
        &cli(&[
            "--scorer",
            &s.addr,
            "score",
            "-f",
            manifest.to_str().unwrap_or_default(),
            "--limit",
            "2",
        ])
        .await,
    );
    assert!(out.contains("Summary:   2/2 nodes are available"), "{out}");
    assert!(out.contains("Would go to n1"), "the cooler node: {out}");
    let explained = stdout(&cli(&["--scorer", &s.addr, "explain", "shop/web"]).await);
    assert!(explained.contains("Pod:       shop/web"), "{explained}");
    assert!(explained.contains("by a Score call"), "{explained}");
    assert!(explained.contains("Outcome:   best node n1"), "{explained}");
    let json = stdout(
        &cli(&[
            "--scorer", &s.addr, "-o", "json", "explain", "web", "-n", "shop",
        ])
        .await,
    );
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(v["candidates"][0]["node"], "n1");
    assert!(
        v["candidates"][0]["plugins"]
            .as_array()
            .is_some_and(|p| !p.is_empty())
    );
    // Too big for any node: every rejection is named.
    std::fs::write(
        &manifest,
        "kind: Pod\nmetadata: {name: giant}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {cpu: '500'}}\n",
    )
    .expect("write");
    let out = stdout(
        &cli(&[
            "--scorer",
            &s.addr,
            "score",
            "-f",
            manifest.to_str().unwrap_or_default(),
        ])
        .await,
    );
    assert!(
        out.contains("0/2 nodes are available: 2 Insufficient cpu."),
        "{out}"
    );
    assert!(out.contains("NodeResourcesFit  2"), "{out}");
    let profiles = stdout(&cli(&["--scorer", &s.addr, "profiles"]).await);
    assert!(
        profiles
            .lines()
            .nth(1)
            .is_some_and(|l| l.contains("(default)")),
        "{profiles}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_say_what_is_wrong_and_exit_non_zero() {
    let s = scorer(&[("n1", 0.2)]).await;
    let missing = cli(&["--scorer", &s.addr, "explain", "shop/never"]).await;
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("pod shop/never was not scheduled or scored by Loadstar"),
        "{err}"
    );
    let dead = cli(&["--scorer", "127.0.0.1:1", "top"]).await;
    assert!(!dead.status.success());
    let err = String::from_utf8_lossy(&dead.stderr);
    assert!(
        err.starts_with("error: cannot reach the scorer at http://127.0.0.1:1"),
        "{err}"
    );
    assert!(!err.contains("backtrace"), "{err}");
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = dir.path().join("svc.yaml");
    std::fs::write(&svc, "kind: Service\nmetadata: {name: s}\n").expect("write");
    let none = cli(&[
        "--scorer",
        &s.addr,
        "score",
        "-f",
        svc.to_str().unwrap_or_default(),
    ])
    .await;
    let err = String::from_utf8_lossy(&none.stderr);
    assert!(
        err.contains("no Pod and no workload with a pod template"),
        "{err}"
    );
}
