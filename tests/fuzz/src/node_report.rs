//! `node_report` target: what the scorer does with an agent's report — protobuf decoding of
//! `loadstar.v1.NodeReport` (prost), `validate` (scorer/store/src/validate.rs, which runs the
//! wire → domain conversions of proto/src/convert.rs) and the node store's ingest
//! (`NodeStore::apply_report`, then its snapshot and status views).
//!
//! The report is validated twice: against a fixed scorer clock, and against a clock equal to
//! its own sample time so that the clock-skew check does not stop the fuzzer short of the
//! value checks.
//!
//! Properties: an accepted report yields only finite figures; every ratio is in [0, 1];
//! window statistics are ordered; pod CPU is bounded by the node's CPUs; nothing of a rejected
//! report reaches the store.
use std::time::Instant;

use loadstar_proto::pb;
use loadstar_store::validate::{ReportLimits, validate};
use loadstar_store::{NodeStore, StoreConfig};
use prost::Message;

/// A fixed scorer clock: 2026-01-01T00:00:00Z.
const NOW_NANOS: i64 = 1_767_225_600_000_000_000;

fn check_accepted(report: &pb::NodeReport, a: &loadstar_framework::snapshot::AgentNode) {
    let cap = &a.capacity;
    assert!(cap.logical_cpus > 0);
    assert!(
        cap.cpu_max_frequency_hz.is_finite() && cap.cpu_max_frequency_hz >= 0.0,
        "frequency {}",
        cap.cpu_max_frequency_hz
    );
    assert!(cap.cpu_ghz_total().is_finite());
    for (kind, l) in a.load.iter() {
        crate::assert_ratio(kind.name(), l.latest);
        let mut prev = 0;
        for w in &l.windows {
            assert!(w.window_seconds >= prev, "windows sorted");
            prev = w.window_seconds;
            for (what, x) in [
                ("mean", w.mean),
                ("stddev", w.stddev),
                ("min", w.min),
                ("max", w.max),
                ("p95", w.p95),
            ] {
                crate::assert_ratio(what, x);
            }
            assert!(w.min <= w.max + 1e-9, "{w:?}");
        }
    }
    for r in [a.nodefs_available_ratio, a.nodefs_inodes_free_ratio]
        .into_iter()
        .flatten()
    {
        crate::assert_ratio("nodefs", r);
    }
    for g in &a.gpus {
        crate::assert_ratio("gpu utilization", g.utilization);
    }
    for (uid, p) in &a.pods {
        assert!(!uid.is_empty());
        assert!(p.cpu_millis.is_finite() && p.cpu_millis >= 0.0, "{p:?}");
        assert!(
            p.cpu_millis <= f64::from(cap.logical_cpus) * 1050.0 + 1e-6,
            "{p:?}"
        );
        assert!(p.memory_bytes.is_finite() && p.memory_bytes >= 0.0);
    }
    assert!(a.interval_seconds.is_finite() && a.interval_seconds > 0.0);
    assert!(a.pods.len() <= report.pods.len());
}

/// One input.
pub fn fuzz(data: &[u8]) {
    let Ok(mut report) = pb::NodeReport::decode(data) else {
        return;
    };
    let limits = ReportLimits::default();
    if let Ok(a) = validate(&report, &limits, NOW_NANOS) {
        check_accepted(&report, &a);
    }
    let own_clock = report.sample_time_unix_nanos;
    let accepted = validate(&report, &limits, own_clock);
    if let Ok(a) = &accepted {
        check_accepted(&report, a);
    }
    if let Err(e) = &accepted {
        let _ = (e.kind(), e.to_string());
    }

    // The store's ingest, with the sample time moved to the wall clock so that only the
    // content decides.
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    if report.sample_time_unix_nanos > 0 {
        report.sample_time_unix_nanos = wall;
    }
    let store = NodeStore::new(StoreConfig::default());
    let name = report.node_name.clone();
    let now = Instant::now();
    let stored = store.apply_report(report.clone(), now);
    if stored.is_err() {
        assert!(store.is_empty(), "a rejected report reached the store");
        return;
    }
    let snap = store.snapshot_now();
    assert_eq!(snap.nodes().len(), 1);
    let status = store.node_status(&name);
    assert!(status.is_some());
    let _ = status.map(|s| s.encode_to_vec());
    let _ = store.list_status();
    // The same report again (an agent resending after a reconnect) is accepted and changes
    // nothing; the same sequence with another sample time is out of sequence for the same
    // agent instance, unless the instance is anonymous.
    let before = store.node_status(&name).map(|s| s.reports_accepted);
    let again = store.apply_report(report.clone(), now);
    if !report.agent_instance.is_empty() {
        assert!(again.is_ok(), "the stored report resent was refused");
        assert_eq!(
            store.node_status(&name).map(|s| s.reports_accepted),
            before,
            "the stored report resent was counted again"
        );
        let mut replay = report.clone();
        replay.sample_time_unix_nanos = replay.sample_time_unix_nanos.saturating_add(1);
        assert!(
            store.apply_report(replay, now).is_err(),
            "a repeated sequence number was accepted"
        );
    }
    store.sweep(now + std::time::Duration::from_secs(3600));
}
