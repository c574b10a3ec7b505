//! Live cross-checks of the agent's sampler against psutil on this machine, under load:
//! a CPU busy loop, a direct-I/O disk write (dd), and TCP traffic over a veth pair into a
//! network namespace the test creates. Also a differential check of our parsers against
//! procfs-core on this machine's real files.
//!
//! Tolerances (absolute unless stated), for windows of ~2 s where the agent and psutil read
//! the same kernel files within about a millisecond of each other:
//! - CPU utilisation: ±0.03 (USER_HZ tick granularity over 2 CPUs × 2 s is ±0.5 %).
//! - Memory used ratio: ±0.01; capacity: equal to psutil's total.
//! - Disk write rate: ±5 % + 1 MB/s; busy ratio: ±0.05 (other processes' I/O is seen by both).
//! - NIC transmit rate: ±5 % + 10 kB/s.
//! - nodefs available bytes: ±1 % (other writers).
//!
//! The CPU, memory, disk and filesystem checks run in plain `cargo test` (they need python3
//! with psutil: `pip install psutil`, installed by tests/e2e/install-deps.sh). The veth
//! check needs root and `ip netns`, so it is `#[ignore]`d:
//! `cargo test -p loadstar-tests --test agent_live -- --ignored`.
mod agent_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agent_support::{assert_valid, usage};
use loadstar_proto::pb::{self, Resource};
use loadstar_sampler::sampler::{Sampler, SamplerConfig};
use serde_json::Value;

const PSUTIL_HELPER: &str = r#"
import sys, json, time
import psutil
for line in sys.stdin:
    path = line.strip() or "/"
    t = time.monotonic()
    out = {
        "t": t,
        "cpu": psutil.cpu_times()._asdict(),
        "mem": psutil.virtual_memory()._asdict(),
        "net": {k: v._asdict() for k, v in psutil.net_io_counters(pernic=True).items()},
        "disk": {k: v._asdict() for k, v in (psutil.disk_io_counters(perdisk=True) or {}).items()},
        "du": psutil.disk_usage(path)._asdict(),
    }
    print(json.dumps(out), flush=True)
"#;

/// A python3 process answering psutil snapshots on demand.
struct Psutil {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Psutil {
    fn start() -> Psutil {
        let mut child = Command::new("python3")
            .args(["-c", PSUTIL_HELPER])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 is required for the live cross-check");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut p = Psutil {
            child,
            stdin,
            stdout,
        };
        // Warm up (imports) and check psutil is there.
        let v = p.try_snap("/");
        assert!(
            v.is_some(),
            "psutil is required: pip install psutil (tests/e2e/install-deps.sh)"
        );
        p
    }

    fn try_snap(&mut self, path: &str) -> Option<Value> {
        writeln!(self.stdin, "{path}").ok()?;
        self.stdin.flush().ok()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line).ok()?;
        serde_json::from_str(&line).ok()
    }

    fn snap(&mut self) -> Value {
        self.try_snap("/").expect("psutil snapshot")
    }
}

impl Drop for Psutil {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_f64()
        .unwrap_or_else(|| panic!("psutil field {path:?} missing in {v}"))
}

/// psutil's own CPU busy fraction between two `cpu_times()` snapshots (its cpu_percent
/// formula: busy = total − idle − iowait, guest excluded from total).
fn psutil_cpu(a: &Value, b: &Value) -> f64 {
    let total = |v: &Value| -> f64 {
        let c = &v["cpu"];
        let sum: f64 = c
            .as_object()
            .expect("cpu times")
            .values()
            .filter_map(Value::as_f64)
            .sum();
        sum - c["guest"].as_f64().unwrap_or(0.0) - c["guest_nice"].as_f64().unwrap_or(0.0)
    };
    let idle = |v: &Value| f(v, &["cpu", "idle"]) + v["cpu"]["iowait"].as_f64().unwrap_or(0.0);
    let dt = total(b) - total(a);
    let busy = dt - (idle(b) - idle(a));
    (busy / dt).clamp(0.0, 1.0)
}

fn close(what: &str, agent: f64, psutil: f64, abs: f64, rel: f64) {
    let tol = abs + rel * psutil.abs();
    assert!(
        (agent - psutil).abs() <= tol,
        "{what}: agent {agent} vs psutil {psutil} (tolerance {tol})"
    );
    eprintln!("{what}: agent {agent:.6} psutil {psutil:.6} (±{tol:.6})");
}

fn live_config() -> SamplerConfig {
    SamplerConfig {
        node_name: "live".into(),
        gpu: false,
        ..SamplerConfig::default()
    }
}

/// One agent sample and one psutil snapshot, back to back.
fn both(s: &mut Sampler, p: &mut Psutil) -> (pb::NodeReport, Value) {
    let r = s.sample();
    let v = p.snap();
    (r, v)
}

#[test]
fn cpu_and_memory_agree_with_psutil_under_a_busy_loop() {
    let mut p = Psutil::start();
    let mut s = Sampler::new(live_config()).expect("valid");
    let (r0, v0) = both(&mut s, &mut p);
    let stop = Arc::new(AtomicBool::new(false));
    let spinner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut x = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                std::hint::black_box(x);
            }
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    let (r1, v1) = both(&mut s, &mut p);
    stop.store(true, Ordering::Relaxed);
    spinner.join().expect("spinner");

    assert_valid(&r1);
    let cpus = r1.capacity.as_ref().expect("capacity").logical_cpus as f64;
    let agent_cpu = usage(&r1, Resource::Cpu).expect("cpu").latest_ratio;
    let ps_cpu = psutil_cpu(&v0, &v1);
    close("cpu utilisation", agent_cpu, ps_cpu, 0.03, 0.0);
    assert!(
        agent_cpu >= 1.0 / cpus - 0.05,
        "the busy loop alone keeps one of {cpus} CPUs busy: {agent_cpu}"
    );

    let cap = r0.capacity.as_ref().expect("capacity");
    assert_eq!(cap.memory_bytes as f64, f(&v0, &["mem", "total"]));
    for (r, v) in [(&r0, &v0), (&r1, &v1)] {
        let used =
            (f(v, &["mem", "total"]) - f(v, &["mem", "available"])) / f(v, &["mem", "total"]);
        close(
            "memory used ratio",
            usage(r, Resource::Memory).expect("memory").latest_ratio,
            used,
            0.01,
            0.0,
        );
        close(
            "memory available bytes",
            r.eviction
                .as_ref()
                .expect("eviction")
                .memory_available_bytes as f64,
            f(v, &["mem", "available"]),
            64.0 * 1024.0 * 1024.0,
            0.0,
        );
        close(
            "nodefs available bytes",
            r.eviction
                .as_ref()
                .expect("eviction")
                .nodefs_available_bytes
                .expect("nodefs") as f64,
            f(v, &["du", "free"]),
            0.0,
            0.01,
        );
    }
}

#[test]
fn disk_write_rate_agrees_with_psutil_under_dd() {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).expect("tempdir");
    let target = dir.path().join("dd.out");
    let mut p = Psutil::start();
    let mut s = Sampler::new(live_config()).expect("valid");
    let (_, v0) = both(&mut s, &mut p);
    let start = Instant::now();
    let dd = Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", target.display()))
        .args(["bs=1M", "count=256", "oflag=direct"])
        .stderr(Stdio::null())
        .status()
        .expect("dd");
    assert!(dd.success(), "dd failed");
    // Give the window a fixed length so both tools cover the same seconds.
    std::thread::sleep(Duration::from_secs(2).saturating_sub(start.elapsed()));
    let (r1, v1) = both(&mut s, &mut p);
    assert_valid(&r1);
    let dt = f(&v1, &["t"]) - f(&v0, &["t"]);
    let mut checked = 0;
    for d in &r1.disks {
        let Some(ps1) = v1["disk"].get(&d.name) else {
            continue;
        };
        let ps0 = &v0["disk"][&d.name];
        let rate = (f(ps1, &["write_bytes"]) - f(ps0, &["write_bytes"])) / dt;
        close(
            &format!("{} write bytes/s", d.name),
            d.write_bytes_per_second,
            rate,
            1e6,
            0.05,
        );
        let read = (f(ps1, &["read_bytes"]) - f(ps0, &["read_bytes"])) / dt;
        close(
            &format!("{} read bytes/s", d.name),
            d.read_bytes_per_second,
            read,
            1e6,
            0.05,
        );
        let busy = (f(ps1, &["busy_time"]) - f(ps0, &["busy_time"])) / 1000.0 / dt;
        close(
            &format!("{} busy ratio", d.name),
            d.utilization_ratio,
            busy.min(1.0),
            0.05,
            0.0,
        );
        checked += 1;
    }
    assert!(
        checked >= 1,
        "no whole disk in common: agent {:?}",
        r1.disks
    );
    let busiest_write = r1
        .disks
        .iter()
        .map(|d| d.write_bytes_per_second)
        .fold(0.0, f64::max);
    assert!(
        busiest_write * dt >= 200.0 * 1e6,
        "dd wrote 256 MiB with O_DIRECT; the agent saw {busiest_write} B/s over {dt} s"
    );
}

/// Our parsers and procfs-core's agree on this machine's files.
#[test]
fn parsers_agree_with_procfs_core_on_this_machine() {
    use loadstar_sampler::collector::{disk, memory, network};
    use procfs_core::{FromRead, Meminfo};

    let text = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
    let ours = memory::parse_meminfo(&text).expect("ours");
    let theirs = Meminfo::from_read(text.as_bytes()).expect("procfs-core");
    assert_eq!(ours.total_bytes, theirs.mem_total);
    assert_eq!(Some(ours.available_bytes), theirs.mem_available);

    let text = std::fs::read_to_string("/proc/1/net/dev").expect("net/dev");
    let ours = network::parse_net_dev(&text).expect("ours");
    let theirs =
        procfs_core::net::InterfaceDeviceStatus::from_read(text.as_bytes()).expect("procfs-core");
    assert_eq!(ours.len(), theirs.0.len());
    for l in &ours {
        let t = &theirs.0[l.name];
        assert_eq!(
            (l.rx_bytes, l.tx_bytes),
            (t.recv_bytes, t.sent_bytes),
            "{}",
            l.name
        );
    }

    let text = std::fs::read_to_string("/proc/diskstats").expect("diskstats");
    let ours = disk::parse_diskstats(&text).expect("ours");
    let theirs = procfs_core::DiskStats::from_read(text.as_bytes()).expect("procfs-core");
    assert_eq!(ours.len(), theirs.0.len());
    for (o, t) in ours.iter().zip(&theirs.0) {
        assert_eq!(o.name, t.name);
        assert_eq!(
            (
                o.reads,
                o.sectors_read,
                o.writes,
                o.sectors_written,
                o.io_ticks_ms
            ),
            (
                t.reads,
                t.sectors_read,
                t.writes,
                t.sectors_written,
                t.time_in_progress
            )
        );
    }
}

/// A network namespace with a veth pair, removed on drop.
struct VethNs {
    ns: String,
    host_if: String,
    peer_ip: String,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl VethNs {
    fn create() -> VethNs {
        let id = std::process::id() % 10_000;
        let ns = format!("lsagent{id}");
        let host_if = format!("lsa{id}h");
        let peer_if = format!("lsa{id}p");
        let octet = id % 250 + 1;
        let host_ip = format!("10.213.{octet}.1");
        let peer_ip = format!("10.213.{octet}.2");
        let v = VethNs {
            ns: ns.clone(),
            host_if: host_if.clone(),
            peer_ip: peer_ip.clone(),
        };
        ip(&["netns", "add", &ns]);
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &peer_if,
        ]);
        ip(&["link", "set", &peer_if, "netns", &ns]);
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &host_if]);
        ip(&["link", "set", &host_if, "up"]);
        ip(&[
            "netns",
            "exec",
            &ns,
            "ip",
            "addr",
            "add",
            &format!("{peer_ip}/30"),
            "dev",
            &peer_if,
        ]);
        ip(&["netns", "exec", &ns, "ip", "link", "set", &peer_if, "up"]);
        ip(&["netns", "exec", &ns, "ip", "link", "set", "lo", "up"]);
        v
    }
}

impl Drop for VethNs {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .status();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// A TCP sink inside the namespace that counts bytes until the sender closes.
const SINK: &str = r#"
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5201)); s.listen(1)
print("ready", flush=True)
c, _ = s.accept(); n = 0
while True:
    b = c.recv(1 << 16)
    if not b: break
    n += len(b)
print(n, flush=True)
"#;

#[test]
#[ignore = "needs root and `ip netns`; run: cargo test -p loadstar-tests --test agent_live -- --ignored"]
fn veth_traffic_agrees_with_psutil() {
    let veth = VethNs::create();
    let mut sink = Command::new("ip")
        .args([
            "netns",
            "exec",
            &veth.ns,
            "python3",
            "-c",
            SINK,
            &veth.peer_ip,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("sink");
    let mut sink_out = BufReader::new(sink.stdout.take().expect("stdout"));
    let mut ready = String::new();
    sink_out.read_line(&mut ready).expect("sink ready");
    assert_eq!(ready.trim(), "ready");

    // The veth is virtual: counted only when included.
    let mut plain = Sampler::new(live_config()).expect("valid");
    let r = plain.sample();
    assert!(
        r.nics.iter().all(|n| n.name != veth.host_if),
        "a veth is not a physical NIC"
    );
    let mut s = Sampler::new(SamplerConfig {
        net_include: vec![veth.host_if.clone()],
        ..live_config()
    })
    .expect("valid");
    let mut p = Psutil::start();
    let (_, v0) = both(&mut s, &mut p);

    // 64 MiB, bounded, to the namespace only.
    const BYTES: usize = 64 << 20;
    let start = Instant::now();
    let mut conn = std::net::TcpStream::connect((veth.peer_ip.as_str(), 5201)).expect("connect");
    let chunk = vec![0x5au8; 1 << 16];
    for _ in 0..BYTES / chunk.len() {
        conn.write_all(&chunk).expect("send");
    }
    drop(conn);
    let mut received = String::new();
    sink_out.read_line(&mut received).expect("sink count");
    assert_eq!(received.trim().parse::<usize>().expect("count"), BYTES);
    std::thread::sleep(Duration::from_secs(2).saturating_sub(start.elapsed()));
    let (r1, v1) = both(&mut s, &mut p);
    let _ = sink.wait();
    let mut rest = String::new();
    let _ = sink_out.read_to_string(&mut rest);

    assert_valid(&r1);
    let nic = r1
        .nics
        .iter()
        .find(|n| n.name == veth.host_if)
        .expect("included veth is reported");
    let dt = f(&v1, &["t"]) - f(&v0, &["t"]);
    let sent = f(&v1["net"][&veth.host_if], &["bytes_sent"])
        - f(&v0["net"][&veth.host_if], &["bytes_sent"]);
    let recv = f(&v1["net"][&veth.host_if], &["bytes_recv"])
        - f(&v0["net"][&veth.host_if], &["bytes_recv"]);
    close(
        "veth tx bytes/s",
        nic.tx_bytes_per_second,
        sent / dt,
        10e3,
        0.05,
    );
    close(
        "veth rx bytes/s",
        nic.rx_bytes_per_second,
        recv / dt,
        10e3,
        0.05,
    );
    assert!(
        nic.tx_bytes_per_second * dt >= BYTES as f64,
        "all 64 MiB left through the veth"
    );
    let cap = r1
        .capacity
        .as_ref()
        .expect("capacity")
        .nics
        .iter()
        .find(|n| n.name == veth.host_if)
        .expect("capacity")
        .clone();
    let expected_util = (nic.tx_bytes_per_second.max(nic.rx_bytes_per_second) * 8.0
        / cap.speed_bits_per_second as f64)
        .min(1.0);
    close(
        "veth utilisation",
        nic.utilization_ratio,
        expected_util,
        1e-9,
        0.0,
    );
}
