//! The Alibaba cluster-trace-v2018 converter on the shipped synthetic sample
//! (`scorer/traces/data/alibaba-2018-sample`): every line is accounted for, the figures follow
//! the trace's units, the written CSVs read back as the same workload, and the converted
//! workload replays in the simulator.
use std::collections::HashSet;
use std::path::PathBuf;

use loadstar_sim::cluster::Cluster;
use loadstar_sim::engine::{SimSettings, simulate};
use loadstar_sim::scenario::Profiles;
use loadstar_sim::trace::Trace;
use loadstar_traces::alibaba::{AlibabaOptions, convert_dir};

fn sample() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/alibaba-2018-sample")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(sample().join(name)).expect("sample table")
}

fn window() -> AlibabaOptions {
    AlibabaOptions {
        start_s: 86_400.0,
        window_s: Some(14_400.0),
        ..AlibabaOptions::default()
    }
}

#[test]
fn every_line_is_kept_or_skipped_with_a_reason() {
    let c = convert_dir(&sample(), &window()).expect("sample converts");
    for (table, t) in &c.report.tables {
        let skipped: u64 = t.skipped.values().map(|(n, _)| n).sum();
        let lines = read(table).lines().filter(|l| !l.trim().is_empty()).count() as u64;
        assert_eq!(t.lines, lines, "{table}");
        assert_eq!(t.kept + skipped, lines, "{table}: {:?}", t.skipped);
        assert!(
            !t.skipped.keys().any(|r| r.starts_with("malformed")),
            "{table}: the sample is well-formed: {:?}",
            t.skipped
        );
    }
    // Independent counts from the raw files.
    let machines: HashSet<String> = read("machine_meta.csv")
        .lines()
        .map(|l| l.split(',').next().unwrap_or_default().to_string())
        .collect();
    let containers: HashSet<String> = read("container_meta.csv")
        .lines()
        .map(|l| l.split(',').next().unwrap_or_default().to_string())
        .collect();
    let ran = read("batch_instance.csv")
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let (start, end): (f64, f64) = (
                f[5].parse().expect("start_time"),
                f[6].parse().expect("end_time"),
            );
            start > 0.0 && end > 86_400.0 && start < 100_800.0 && machines.contains(f[7])
        })
        .count();
    assert_eq!(c.cluster.nodes.len(), machines.len());
    assert_eq!(c.report.containers, containers.len());
    assert_eq!(c.report.instances, ran);
    assert_eq!(c.trace.pods.len(), containers.len() + ran);
    assert!(
        c.report.invalid_values > 0,
        "the sample holds -1/101 markers"
    );
    assert_eq!(
        c.report.tables["batch_instance.csv"].skipped["machine not kept"].0,
        read("batch_instance.csv")
            .lines()
            .filter(|l| l.contains(",m_9999,"))
            .count() as u64
    );
}

#[test]
fn figures_follow_the_trace_units() {
    let c = convert_dir(&sample(), &window()).expect("sample converts");
    // First sample of c_1 in the raw usage table, and its request in the meta table.
    let usage = read("container_usage.csv");
    let row: Vec<f64> = usage
        .lines()
        .find(|l| l.starts_with("c_1,"))
        .expect("c_1 has usage")
        .split(',')
        .skip(2)
        .map(|f| f.parse().expect("number"))
        .collect();
    let meta = read("container_meta.csv");
    let m: Vec<&str> = meta
        .lines()
        .find(|l| l.starts_with("c_1,"))
        .expect("c_1 meta")
        .split(',')
        .collect();
    let cpu_request: f64 = m[5].parse().expect("cpu_request");
    let mem_size: f64 = m[7].parse().expect("mem_size");
    let pod = c
        .trace
        .pods
        .iter()
        .find(|p| p.id == "c-1")
        .expect("c_1 converted");
    assert_eq!(pod.cpu_request_m as f64, cpu_request * 10.0);
    let mem_mib = mem_size / 100.0 * 512.0 * 1024.0;
    assert_eq!(pod.memory_request_mib, mem_mib.round() as i64);
    let (offset, u) = pod.usage.series.as_ref().expect("series")[0];
    // c_1 existed before the window, so it arrives at 0 and its first sample (at the window
    // start) has offset 0.
    assert_eq!(pod.arrival_s, 0.0);
    assert_eq!(offset, row[0] - 86_400.0);
    if row[1] >= 0.0 && row[1] <= 100.0 {
        assert!((u.cpu_m - row[1] / 100.0 * cpu_request * 10.0).abs() < 1e-9);
    }
    assert!((u.memory_mib - row[2] / 100.0 * mem_mib).abs() < 1e-6);
    let net = row[6].max(row[7]);
    assert!((u.net_mbps - net / 100.0 * 10_000.0).abs() < 1e-6);
    assert!(c.cluster.nodes.iter().all(|n| n.cpu_ghz == 2.5));
}

#[test]
fn written_csvs_read_back_as_the_same_workload() {
    let c = convert_dir(&sample(), &window()).expect("sample converts");
    let back = Trace::from_csv(
        "trace.csv",
        &c.trace.to_csv(),
        Some("usage.csv"),
        Some(&c.trace.usage_csv()),
    )
    .expect("converted trace reads back");
    assert_eq!(back.pods.len(), c.trace.pods.len());
    for (a, b) in c.trace.pods.iter().zip(back.pods.iter()) {
        assert_eq!(a.id, b.id);
        assert_eq!(a.cpu_request_m, b.cpu_request_m);
        assert_eq!(a.memory_request_mib, b.memory_request_mib);
        assert_eq!(
            a.usage.series.as_ref().map(|s| s.len()),
            b.usage.series.as_ref().map(|s| s.len()),
            "{}",
            a.id
        );
        // Means are written with one decimal, the burst shape with three.
        assert!(
            (a.usage.mean.cpu_m - b.usage.mean.cpu_m).abs() <= 0.05,
            "{}",
            a.id
        );
        assert!(
            (a.usage.amplitude - b.usage.amplitude).abs() <= 5.01e-4,
            "{}",
            a.id
        );
        assert_eq!(a.usage.pattern, b.usage.pattern, "{}", a.id);
    }
    let nodes = Cluster::from_csv("nodes.csv", &c.cluster.to_csv()).expect("nodes read back");
    assert_eq!(*nodes.nodes, *c.cluster.nodes);
}

#[test]
fn the_converted_sample_replays_and_every_pod_is_placed() {
    let c = convert_dir(&sample(), &window()).expect("sample converts");
    let profiles = Profiles::load(None).expect("embedded config");
    for name in ["loadstar-requests", "loadstar"] {
        let mut settings = SimSettings {
            duration_s: Some(14_400.0),
            ..SimSettings::default()
        };
        profiles.apply(&mut settings);
        let profile = profiles.get(name).expect("profile");
        let r = simulate(profile, &c.cluster, &c.trace, &settings, &|_| {}).expect("run");
        let s = &r.summary;
        assert_eq!(s.pods_pending, 0, "{name}: {:?}", s.pending_at_end);
        assert_eq!(s.pods_placed as usize, c.trace.pods.len(), "{name}");
        let cpu = s
            .resources
            .iter()
            .find(|r| r.resource == "cpu")
            .expect("cpu");
        let net = s
            .resources
            .iter()
            .find(|r| r.resource == "network")
            .expect("network");
        assert!(cpu.util_mean > 0.05, "{name}: cpu {}", cpu.util_mean);
        assert!(net.util_mean > 0.01, "{name}: network {}", net.util_mean);
    }
}
