//! How much memory the node store holds per node, apart from the gRPC streams that feed it:
//! the growth of this process's RSS after N nodes each reported once with the load
//! generator's report (`loadstar-loadgen`: 4 resources × 60/300/900 s windows, one NIC, one
//! disk), then after the snapshot the scheduler and `Score` read. `bench/scorer-ingest.sh`
//! measures the whole process (RSS) with the streams.
//!
//! Run: `cargo run --release -p loadstar-store --example store_memory N` (one N per process:
//! freed memory is not given back to the system, so a second N would reuse the first's).
use std::time::Instant;

use loadstar_store::{NodeStore, StoreConfig};
use loadstar_testkit::agent::{self as simagent, SyntheticLoad};

/// This process's resident set, bytes (`VmRSS` in `/proc/self/status`).
fn rss() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn main() {
    let n: usize = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 5_000,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: store_memory [NODES]");
            std::process::exit(2);
        }
    };
    {
        let before = rss();
        let store = NodeStore::new(StoreConfig::default());
        let cap = simagent::capacity(16, 64);
        let mut wire = 0;
        for i in 0..n {
            let load = SyntheticLoad {
                cpu: 0.1 + (i % 70) as f64 / 100.0,
                memory: 0.5,
                network: 0.2,
                disk_io: 0.1,
                stddev: 0.05,
            };
            let r = simagent::report(&format!("node-{i:05}"), "instance-1", 1, &cap, load);
            wire = prost::Message::encoded_len(&r);
            if let Err(e) = store.apply_report(r, Instant::now()) {
                eprintln!("node-{i:05}: report refused: {e}");
                std::process::exit(1);
            }
        }
        let stored = rss().saturating_sub(before);
        let snap = store.snapshot_now();
        let with_snapshot = rss().saturating_sub(before);
        println!(
            "nodes {n}: store {:.0} B/node, with a snapshot {:.0} B/node (RSS growth); \
             one report is {wire} B on the wire",
            stored as f64 / n as f64,
            with_snapshot as f64 / n as f64
        );
        drop(snap);
        drop(store);
    }
}
