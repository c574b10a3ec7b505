//! The scorer serves gRPC on its own runtime, whose threads are named `loadstar-grpc`:
//! `bench/scheduler-throughput.sh` counts their CPU as the scorer's ingest. This checks, on
//! the real binary, that those threads exist and are the ones doing the serving, and that the
//! main runtime (`loadstar-main`) and the gRPC runtime have the threads `--main-threads` and
//! `--grpc-threads` ask for.
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use loadstar_proto::pb;
use loadstar_proto::pb::scorer_client::ScorerClient;

struct Scorer(Child);

impl Drop for Scorer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// (threads named `loadstar-grpc`, their utime + stime in clock ticks).
fn grpc_threads(pid: u32) -> (usize, u64) {
    threads(pid, "loadstar-grpc")
}

/// (threads of `pid` named `name`, their utime + stime in clock ticks).
fn threads(pid: u32, name: &str) -> (usize, u64) {
    let mut found = (0, 0);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return found;
    };
    for t in tasks.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        found.0 += 1;
        found.1 += loadstar_common::procstat::cpu_ticks(&stat).unwrap_or(0);
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_is_served_by_its_own_named_threads() {
    let (scorer, addr) = start(&[], &[]).await;
    let pid = scorer.0.id();
    assert_eq!(
        grpc_threads(pid).0,
        1,
        "the gRPC runtime has one thread by default"
    );
    assert_eq!(
        threads(pid, "loadstar-main").0,
        1,
        "the main runtime has one thread by default"
    );
    // A second of calls back to back: serving them is CPU on the gRPC thread.
    let (before, after, calls) = serve_for(pid, &addr, 1).await;
    assert!(
        after > before,
        "{calls} calls left the gRPC thread's CPU at {before} ticks"
    );
}

/// `Score` evaluates on the one-thread runtime's blocking threads (`loadstar-pool`), not on
/// the serving thread: none exist before the first call, one answers it.
#[tokio::test]
async fn score_evaluates_beside_the_grpc_thread() {
    let (scorer, addr) = start(&[], &[]).await;
    let pid = scorer.0.id();
    assert_eq!(threads(pid, "loadstar-pool").0, 0, "no evaluation yet");
    let mut client = ScorerClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the scorer");
    let request = pb::ScoreRequest {
        pod: Some(pb::score_request::Pod::Description(pb::PodDescription {
            name: "probe".into(),
            ..Default::default()
        })),
        ..Default::default()
    };
    let answer = client.score(request).await.expect("Score").into_inner();
    assert!(!answer.ranked.is_empty(), "the standalone node ranks");
    assert!(
        threads(pid, "loadstar-pool").0 >= 1,
        "the evaluation ran on a blocking thread"
    );
    assert_eq!(grpc_threads(pid).0, 1, "still one serving thread");
}

/// `standalone` on a free port with `extra` arguments and `env` (`LOADSTAR_MAIN_THREADS` and
/// `LOADSTAR_GRPC_THREADS` only from `env`, never the caller's); returns it and its address
/// once it answers.
async fn start(extra: &[&str], env: &[(&str, &str)]) -> (Scorer, String) {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .to_string();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_loadstar-scorer"));
    cmd.args(extra)
        .args([
            "standalone",
            "--listen",
            &addr,
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .env_remove("LOADSTAR_MAIN_THREADS")
        .env_remove("LOADSTAR_GRPC_THREADS")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let scorer = Scorer(cmd.spawn().expect("start loadstar-scorer standalone"));
    // Served, not only listening: the port is bound before the gRPC runtime starts.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !answers(&addr).await {
        assert!(Instant::now() < deadline, "scorer never answered on {addr}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (scorer, addr)
}

/// Whether a `ListNodes` call to `addr` succeeds.
async fn answers(addr: &str) -> bool {
    let Ok(mut client) = ScorerClient::connect(format!("http://{addr}")).await else {
        return false;
    };
    client
        .list_nodes(pb::ListNodesRequest::default())
        .await
        .is_ok()
}

/// Counts the threads named `loadstar-main`: the main runtime's threads, and blocking-pool
/// threads of that runtime while they live (standalone starts none: its in-process sampler
/// reads `/proc` in a task).
#[tokio::test]
async fn main_threads_come_from_the_flag_or_the_environment() {
    let (s, _) = start(&["--main-threads", "3"], &[]).await;
    assert_eq!(threads(s.0.id(), "loadstar-main").0, 3);
    drop(s);
    let (s, _) = start(&[], &[("LOADSTAR_MAIN_THREADS", "2")]).await;
    assert_eq!(threads(s.0.id(), "loadstar-main").0, 2);
    drop(s);
    // Zero is refused with a clear error, before anything starts.
    refused("--main-threads", "0");
}

/// Runs the scorer with `flag value`, which must be refused with an error naming the flag.
fn refused(flag: &str, value: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_loadstar-scorer"))
        .args([flag, value, "standalone"])
        .output()
        .expect("run loadstar-scorer");
    assert!(!out.status.success(), "{flag} {value} was taken");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(flag), "{err}");
}

/// Calls `ListNodes` back to back for `secs` seconds; the gRPC threads' CPU before and after.
async fn serve_for(pid: u32, addr: &str, secs: u64) -> (u64, u64, u32) {
    let mut client = ScorerClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the scorer");
    let before = grpc_threads(pid).1;
    let until = Instant::now() + Duration::from_secs(secs);
    let mut calls = 0u32;
    while Instant::now() < until {
        client
            .list_nodes(pb::ListNodesRequest::default())
            .await
            .expect("ListNodes");
        calls += 1;
    }
    (before, grpc_threads(pid).1, calls)
}

/// One gRPC thread, the default, is tokio's current-thread scheduler on a thread of its own
/// (the first test: it alone serves the calls). More are a multi-thread runtime's workers;
/// 0 is one per CPU.
#[tokio::test]
async fn grpc_threads_come_from_the_flag_or_the_environment() {
    let (s, _) = start(&["--grpc-threads", "3"], &[]).await;
    assert_eq!(grpc_threads(s.0.id()).0, 3, "--grpc-threads 3");
    drop(s);
    let (s, _) = start(&[], &[("LOADSTAR_GRPC_THREADS", "2")]).await;
    assert_eq!(grpc_threads(s.0.id()).0, 2, "LOADSTAR_GRPC_THREADS=2");
    drop(s);
    let (s, _) = start(&["--grpc-threads", "0"], &[]).await;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(grpc_threads(s.0.id()).0, cpus, "--grpc-threads 0");
    drop(s);
    refused("--grpc-threads", "2000");
}
