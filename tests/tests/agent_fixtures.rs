//! The agent's sampler against fixture `/proc`, `/sys` and cgroup trees: many cores with and
//! without cpufreq, NIC speed −1, bonded and virtual NICs, NVMe with partitions and
//! device-mapper, cgroup v1/v2 with systemd/cgroupfs layouts, and truncated or garbage
//! files (a clear error for that collector, never a panic, the others still report).
mod agent_support;

use std::time::Duration;

use agent_support::{FixtureNode, Interval, assert_valid, fixture, resources, timed, usage};
use loadstar_proto::pb::{self, Resource};
use loadstar_sampler::sampler::{Sampler, SamplerConfig};
use proptest::prelude::*;

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

/// Two samples of a fixture with its `next/` overlay applied in between (≥ `gap` apart).
fn two_samples(
    node: &FixtureNode,
    config: SamplerConfig,
    gap: Duration,
) -> (pb::NodeReport, pb::NodeReport, Interval) {
    let mut s = Sampler::new(config).expect("valid config");
    let (r1, a0, a1) = timed(|| s.sample());
    node.advance();
    std::thread::sleep(gap);
    let (r2, b0, b1) = timed(|| s.sample());
    (r1, r2, Interval::between(a0, a1, b0, b1))
}

#[test]
fn large_node_with_cpufreq_bond_virtual_nics_nvme_dm_and_cgroup_v2_systemd() {
    let node = FixtureNode::new("large", Some("v2-systemd"));
    let (r1, r2, dt) = two_samples(&node, node.config(), Duration::from_millis(1000));

    // Capacity: cpufreq wins over cpuinfo's 1200 MHz; the policy0 entry is not a CPU.
    let cap = r1.capacity.as_ref().expect("capacity");
    assert_eq!(cap.logical_cpus, 64);
    assert_eq!(cap.cpu_max_frequency_hz, 3.7e9);
    assert_eq!(cap.memory_bytes, 512 * (1 << 30));
    let nics: Vec<(&str, u64, bool)> = cap
        .nics
        .iter()
        .map(|n| (n.name.as_str(), n.speed_bits_per_second, n.speed_assumed))
        .collect();
    assert_eq!(
        nics,
        vec![
            ("eth0", 25_000_000_000, false),
            ("eth1", 10_000_000_000, true),  // speed -1 → the default
            ("eth2", 10_000_000_000, false), // bond slaves count, the bond master does not
            ("eth3", 10_000_000_000, false),
        ]
    );
    let disks: Vec<&str> = cap.disks.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        disks,
        vec!["nvme0n1", "nvme1n1", "sda"],
        "no partitions, dm, loop"
    );
    assert!(
        cap.disks
            .iter()
            .all(|d| d.rate_source == pb::DiskRateSource::Observed as i32)
    );

    // First sample: rates have no delta yet; memory is a level.
    assert_eq!(
        resources(&r1),
        vec![
            Resource::Cpu,
            Resource::Memory,
            Resource::Network,
            Resource::DiskIo
        ]
    );
    for r in [Resource::Cpu, Resource::Network, Resource::DiskIo] {
        let u = usage(&r1, r).expect("present");
        assert_eq!(u.latest_ratio, 0.0, "{r:?}");
        assert!(u.windows.iter().all(|w| w.sample_count == 0), "{r:?}");
    }
    let mem = usage(&r1, Resource::Memory).expect("memory");
    assert_eq!(mem.latest_ratio, 0.25);
    assert_eq!(mem.windows.len(), 3);
    assert!(
        mem.windows
            .iter()
            .all(|w| w.sample_count == 1 && w.mean_ratio == 0.25)
    );
    let ev = r1.eviction.as_ref().expect("eviction");
    assert_eq!(ev.memory_available_bytes, 402_653_184 * 1024);
    assert!(ev.nodefs_available_ratio.is_some());
    assert!(r1.pods.is_empty(), "pods need two observations");
    assert!(r1.collector_errors.is_empty(), "{:?}", r1.collector_errors);
    assert_valid(&r1);

    // Second sample.
    assert!(r2.collector_errors.is_empty(), "{:?}", r2.collector_errors);
    assert_valid(&r2);
    let cpu = usage(&r2, Resource::Cpu).expect("cpu");
    assert!(
        (cpu.latest_ratio - 0.42).abs() < 1e-12,
        "{}",
        cpu.latest_ratio
    );
    assert!(cpu.windows.iter().all(|w| w.sample_count == 1));

    let nic = |name: &str| r2.nics.iter().find(|n| n.name == name).expect(name);
    dt.assert_rate("eth0 rx", nic("eth0").rx_bytes_per_second, 250e6);
    dt.assert_rate("eth0 tx", nic("eth0").tx_bytes_per_second, 50e6);
    dt.assert_rate(
        "eth0 util",
        nic("eth0").utilization_ratio,
        250e6 * 8.0 / 25e9,
    );
    dt.assert_rate(
        "eth1 util",
        nic("eth1").utilization_ratio,
        10e6 * 8.0 / 10e9,
    );
    dt.assert_rate("eth2 tx", nic("eth2").tx_bytes_per_second, 100e6);
    assert!(
        r2.nics
            .iter()
            .all(|n| !n.name.starts_with("veth") && n.name != "bond0")
    );
    // max(Σrx, Σtx)·8 / Σspeed = max(260 MB, 250 MB)·8 / 55 Gbit.
    let net = usage(&r2, Resource::Network).expect("network");
    dt.assert_rate("network", net.latest_ratio, 260e6 * 8.0 / 55e9);

    let disk = |name: &str| r2.disks.iter().find(|d| d.name == name).expect(name);
    let nvme = disk("nvme0n1");
    dt.assert_rate("nvme read", nvme.read_bytes_per_second, 200.0 * MIB);
    dt.assert_rate("nvme write", nvme.write_bytes_per_second, 100.0 * MIB);
    dt.assert_rate("nvme read iops", nvme.read_iops, 2000.0);
    dt.assert_rate("nvme write iops", nvme.write_iops, 1000.0);
    dt.assert_rate("nvme util", nvme.utilization_ratio, 0.8);
    assert_eq!(disk("nvme1n1").utilization_ratio, 0.0);
    let disk_io = usage(&r2, Resource::DiskIo).expect("disk_io");
    assert_eq!(disk_io.latest_ratio, nvme.utilization_ratio, "busiest disk");
    let cap2 = r2.capacity.as_ref().expect("capacity");
    let observed = cap2.disks[0].max_bytes_per_second as f64;
    dt.assert_rate("observed max", observed + 0.5, 300.0 * MIB); // u64 truncation

    // Pods (cgroup v2, systemd): working set = memory.current − inactive_file.
    let pod = |uid: &str| r2.pods.iter().find(|p| p.pod_uid == uid).expect(uid);
    assert_eq!(r2.pods.len(), 3);
    let g = pod("11111111-2222-3333-4444-555555555555");
    dt.assert_rate("guaranteed cpu", g.cpu_cores, 1.5);
    assert_eq!(g.memory_working_set_bytes as f64, 2.0 * GIB);
    let b = pod("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee");
    dt.assert_rate("burstable cpu", b.cpu_cores, 0.25);
    assert_eq!(b.memory_working_set_bytes as f64, 500.0 * MIB);
    let be = pod("0f0f0f0f-1e1e-2d2d-3c3c-4b4b4b4b4b4b");
    assert_eq!(be.cpu_cores, 0.0);
    assert_eq!(be.memory_working_set_bytes as f64, 64.0 * MIB);

    assert_eq!(r2.sequence, 2);
    assert_eq!(r1.agent_instance, r2.agent_instance);
}

#[test]
fn small_node_without_cpufreq_or_memavailable_and_cgroup_v1_cgroupfs() {
    let node = FixtureNode::new("small", Some("v1-cgroupfs"));
    let config = SamplerConfig {
        default_nic_speed_bits_per_second: 2_000_000_000,
        ..node.config()
    };
    let (r1, r2, dt) = two_samples(&node, config, Duration::from_millis(1000));
    let cap = r1.capacity.as_ref().expect("capacity");
    assert_eq!(cap.logical_cpus, 4);
    assert_eq!(
        cap.cpu_max_frequency_hz, 2893.2e6,
        "cpuinfo fallback, highest core"
    );
    // No MemAvailable: MemFree + Buffers + Cached = 3.5 GiB of 8 GiB.
    assert_eq!(
        usage(&r1, Resource::Memory).expect("memory").latest_ratio,
        0.5625
    );
    assert_eq!(
        r1.eviction
            .as_ref()
            .expect("eviction")
            .memory_available_bytes,
        3_670_016 * 1024
    );
    assert_eq!(cap.nics.len(), 1);
    assert_eq!(
        (cap.nics[0].speed_bits_per_second, cap.nics[0].speed_assumed),
        (2_000_000_000, true)
    );
    let disks: Vec<&str> = cap.disks.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(disks, vec!["vda", "vdb"]);

    assert!(r2.collector_errors.is_empty(), "{:?}", r2.collector_errors);
    assert_valid(&r2);
    let cpu = usage(&r2, Resource::Cpu).expect("cpu").latest_ratio;
    assert!((cpu - 500.0 / 950.0).abs() < 1e-12, "{cpu}");
    dt.assert_rate(
        "network",
        usage(&r2, Resource::Network).expect("network").latest_ratio,
        125e6 * 8.0 / 2e9,
    );
    let vdb = r2.disks.iter().find(|d| d.name == "vdb").expect("vdb");
    dt.assert_rate("vdb write", vdb.write_bytes_per_second, 4096.0 * 512.0);
    dt.assert_rate("vdb util", vdb.utilization_ratio, 0.05);
    dt.assert_rate(
        "disk_io = busiest (vda)",
        usage(&r2, Resource::DiskIo).expect("disk").latest_ratio,
        0.2,
    );
    assert_eq!(r2.pods.len(), 3);
}

#[test]
fn every_cgroup_layout_reports_every_pod() {
    for layout in ["v2-systemd", "v2-cgroupfs", "v1-systemd", "v1-cgroupfs"] {
        let node = FixtureNode::new("small", Some(layout));
        // The guaranteed pod uses 1.5 s of CPU between the samples: over 500 ms that is 3
        // of the fixture's 4 cores (a pod never reads more than the node has).
        let (r1, r2, dt) = two_samples(&node, node.config(), Duration::from_millis(500));
        assert!(
            r1.pods.is_empty(),
            "{layout}: first observation has no CPU delta"
        );
        assert!(
            r2.collector_errors.is_empty(),
            "{layout}: {:?}",
            r2.collector_errors
        );
        let mut got: Vec<(String, u64)> = r2
            .pods
            .iter()
            .map(|p| (p.pod_uid.clone(), p.memory_working_set_bytes))
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                ("0f0f0f0f-1e1e-2d2d-3c3c-4b4b4b4b4b4b".to_string(), 64 << 20),
                ("11111111-2222-3333-4444-555555555555".to_string(), 2 << 30),
                (
                    "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee".to_string(),
                    500 << 20
                ),
            ],
            "{layout}"
        );
        let g = r2
            .pods
            .iter()
            .find(|p| p.pod_uid.starts_with("1111"))
            .expect("guaranteed");
        dt.assert_rate(&format!("{layout} guaranteed cpu"), g.cpu_cores, 1.5);
    }
}

/// A broken file fails its collector with a message naming the file and the line; the
/// other collectors still report and nothing panics.
#[test]
fn truncated_and_garbage_files_fail_only_their_collector() {
    let cases: [(&str, &str, &str, &str, Resource); 9] = [
        (
            "stat-truncated",
            "proc/stat",
            "cpu",
            "line 1: aggregate `cpu` line has 3 fields, expected at least 4",
            Resource::Cpu,
        ),
        (
            "stat-garbage",
            "proc/stat",
            "cpu",
            "line 1: idle: \"9x0000\" is not an unsigned integer",
            Resource::Cpu,
        ),
        (
            "meminfo-truncated",
            "proc/meminfo",
            "memory",
            "line 0: MemAvailable missing and MemFree/Buffers/Cached incomplete",
            Resource::Memory,
        ),
        (
            "meminfo-garbage",
            "proc/meminfo",
            "memory",
            "line 1: MemTotal: \"lots\" is not an unsigned integer",
            Resource::Memory,
        ),
        (
            "meminfo-binary",
            "proc/meminfo",
            "memory",
            "stream did not contain valid UTF-8",
            Resource::Memory,
        ),
        (
            "net-dev-garbage",
            "proc/1/net/dev",
            "network",
            "line 4: no `name:` separator in \"eth1 7 7 7\"",
            Resource::Network,
        ),
        (
            "net-dev-truncated",
            "proc/1/net/dev",
            "network",
            "line 3: eth0: 5 counters, expected 16",
            Resource::Network,
        ),
        (
            "diskstats-truncated",
            "proc/diskstats",
            "disk",
            "line 1: nvme0n1: 5 counters, expected at least 11",
            Resource::DiskIo,
        ),
        (
            "diskstats-garbage",
            "proc/diskstats",
            "disk",
            "line 2: nvme1n1: \"5OO\" is not an unsigned integer",
            Resource::DiskIo,
        ),
    ];
    for (broken, target, collector, message, resource) in cases {
        let node = FixtureNode::new("large", Some("v2-systemd"));
        let mut s = Sampler::new(node.config()).expect("valid");
        // A good first sample, then the file breaks: the resource keeps its windows.
        let good = s.sample();
        assert!(good.collector_errors.is_empty());
        node.replace(target, &fixture(&format!("broken/{broken}")));
        let r = s.sample();
        assert_eq!(
            r.collector_errors.len(),
            1,
            "{broken}: {:?}",
            r.collector_errors
        );
        let e = &r.collector_errors[0];
        assert_eq!(e.collector, collector, "{broken}");
        assert!(e.message.contains(message), "{broken}: {:?}", e.message);
        let path = node.dir.path().join("node").join(target);
        assert!(
            e.message.contains(&path.display().to_string()),
            "{broken}: the message names the file: {:?}",
            e.message
        );
        // Every resource is still there, the broken one with its old windows.
        assert_eq!(resources(&r), resources(&good), "{broken}");
        assert_eq!(
            usage(&r, resource).expect("kept").windows,
            usage(&good, resource).expect("was there").windows,
            "{broken}: nothing pushed"
        );
        assert_eq!(r.pods.len(), 3, "{broken}: cgroup collector unaffected");
        assert_valid(&r);
    }
}

#[test]
fn a_garbage_cpufreq_file_is_reported_but_utilisation_still_counts() {
    let node = FixtureNode::new("large", None);
    node.write(
        "sys/devices/system/cpu/cpu3/cpufreq/cpuinfo_max_freq",
        "fast\n",
    );
    let (r1, r2, _) = two_samples(&node, node.config(), Duration::from_millis(50));
    for r in [&r1, &r2] {
        assert_eq!(r.collector_errors.len(), 1, "{:?}", r.collector_errors);
        let e = &r.collector_errors[0];
        assert_eq!(e.collector, "cpu");
        assert!(
            e.message.ends_with("cpu3/cpufreq/cpuinfo_max_freq: line 1: cpuinfo_max_freq: \"fast\" is not an unsigned integer"),
            "{:?}",
            e.message
        );
        assert_eq!(
            r.capacity.as_ref().expect("capacity").cpu_max_frequency_hz,
            0.0
        );
    }
    let cpu = usage(&r2, Resource::Cpu).expect("cpu");
    assert!(
        (cpu.latest_ratio - 0.42).abs() < 1e-12,
        "{}",
        cpu.latest_ratio
    );
}

#[test]
fn one_broken_pod_is_reported_and_the_others_still_count() {
    let node = FixtureNode::new("small", Some("v2-systemd"));
    let mut s = Sampler::new(node.config()).expect("valid");
    s.sample();
    let bad = node.cgroup_root().join(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podaaaaaaaa_bbbb_cccc_dddd_eeeeeeeeeeee.slice/cpu.stat",
    );
    node.advance();
    std::fs::copy(fixture("broken/cpu.stat-garbage"), &bad).expect("break");
    let r = s.sample();
    assert_eq!(r.collector_errors.len(), 1, "{:?}", r.collector_errors);
    assert_eq!(r.collector_errors[0].collector, "cgroup");
    assert_eq!(
        r.collector_errors[0].message,
        format!(
            "parsing {}: line 1: usage_usec: \"twelve\" is not an unsigned integer",
            bad.display()
        )
    );
    let uids: Vec<&str> = r.pods.iter().map(|p| p.pod_uid.as_str()).collect();
    assert_eq!(
        uids,
        vec![
            "0f0f0f0f-1e1e-2d2d-3c3c-4b4b4b4b4b4b",
            "11111111-2222-3333-4444-555555555555"
        ]
    );
}

#[test]
fn missing_kernel_files_are_not_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = Sampler::new(SamplerConfig {
        node_name: "empty".into(),
        proc_root: dir.path().join("proc"),
        sys_root: dir.path().join("sys"),
        rootfs: dir.path().join("missing-rootfs"),
        cgroup_root: dir.path().join("cgroup"),
        gpu: false,
        ..SamplerConfig::default()
    })
    .expect("valid");
    for seq in 1..=2 {
        let r = s.sample();
        assert_eq!(r.sequence, seq);
        assert!(r.collector_errors.is_empty(), "{:?}", r.collector_errors);
        assert!(r.usage.is_empty());
        assert!(r.pods.is_empty() && r.nics.is_empty() && r.disks.is_empty());
        let ev = r.eviction.as_ref().expect("eviction");
        assert_eq!(ev.nodefs_available_ratio, None);
        assert_valid(&r);
    }
}

#[test]
fn namespace_choice_include_exclude_and_configured_disk_rate() {
    let node = FixtureNode::new("large", None);
    // The agent's own namespace (hostNetwork deployments): proc/net/dev, only eth0.
    let mut own = Sampler::new(SamplerConfig {
        net_namespace_pid: None,
        ..node.config()
    })
    .expect("valid");
    let names = |r: &pb::NodeReport| -> Vec<String> {
        r.capacity
            .as_ref()
            .expect("capacity")
            .nics
            .iter()
            .map(|n| n.name.clone())
            .collect()
    };
    assert_eq!(names(&own.sample()), vec!["eth0"]);

    let mut s = Sampler::new(SamplerConfig {
        net_include: vec!["veth*".into(), "eth1".into()],
        net_exclude: vec!["eth1".into(), "eth3".into()],
        disk_max_bytes_per_second: Some(2_000_000_000),
        ..node.config()
    })
    .expect("valid");
    let r = s.sample();
    assert_eq!(names(&r), vec!["eth0", "eth2", "veth1a2b3c"]);
    let cap = r.capacity.as_ref().expect("capacity");
    assert!(
        cap.disks
            .iter()
            .all(|d| d.max_bytes_per_second == 2_000_000_000
                && d.rate_source == pb::DiskRateSource::Configured as i32)
    );
}

#[test]
fn nic_hot_plug_counter_wrap_and_reset() {
    let node = FixtureNode::new("small", None);
    let dev = |lines: &[(&str, u64, u64)]| {
        let mut t =
            String::from("Inter-| Receive | Transmit\n face |bytes packets|bytes packets\n");
        for (n, rx, tx) in lines {
            t += &format!("{n}: {rx} 0 0 0 0 0 0 0 {tx} 0 0 0 0 0 0 0\n");
        }
        t
    };
    node.write("sys/class/net/eth9/device/uevent", "DRIVER=x\n");
    node.write("sys/class/net/eth9/speed", "1000\n");
    node.write("sys/class/net/ens3/speed", "1000\n");
    let mut s = Sampler::new(node.config()).expect("valid");
    // ens3 close to the 32-bit limit.
    node.write("proc/1/net/dev", &dev(&[("ens3", 4_294_967_000, 10)]));
    s.sample();
    // ens3 wraps (+396 bytes); eth9 appears.
    node.write(
        "proc/1/net/dev",
        &dev(&[("ens3", 100, 10), ("eth9", 5_000_000, 0)]),
    );
    let (r, _, _) = timed(|| s.sample());
    let names: Vec<&str> = r.nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, vec!["ens3", "eth9"]);
    let ens3 = &r.nics[0];
    assert!(ens3.rx_bytes_per_second > 0.0 && ens3.rx_bytes_per_second < 396.0 / 1e-4);
    assert_eq!(
        r.nics[1].rx_bytes_per_second, 0.0,
        "new NIC has no rate yet"
    );
    assert_eq!(r.capacity.as_ref().expect("capacity").nics.len(), 2);
    // ens3 disappears; eth9's 64-bit counter goes backwards: a reset, no rate.
    node.write("proc/1/net/dev", &dev(&[("eth9", 1_000, 0)]));
    let r = s.sample();
    let names: Vec<&str> = r.nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, vec!["eth9"]);
    // 5 MB → 1 kB is below 2^32 so it is read as a 32-bit wrap of ~4.3 GB; within
    // ~a millisecond that exceeds twice the 1 Gbit/s link: discarded as a reset.
    assert_eq!(r.nics[0].rx_bytes_per_second, 0.0);
    assert_valid(&r);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Arbitrary content in every kernel file the sampler reads: no panic, every report is
    /// valid (ratios finite in [0, 1]) and errors name a collector.
    #[test]
    fn arbitrary_kernel_files_never_panic(
        files in prop::collection::vec(
            prop::string::string_regex("(cpu[0-9]? |[a-zA-Z_]{1,12}:? ?|[0-9]{1,22} ?|-1|\n| {1,3}|\u{e9}|\\|){0,60}")
                .expect("regex"),
            7,
        ),
    ) {
        let node = FixtureNode::new("small", Some("v2-cgroupfs"));
        let mut s = Sampler::new(node.config()).expect("valid");
        let targets = ["proc/stat", "proc/meminfo", "proc/1/net/dev", "proc/diskstats", "proc/cpuinfo", "sys/class/net/ens3/speed"];
        for round in 0..2 {
            for (t, text) in targets.iter().zip(&files) {
                node.write(t, &format!("{text}{round}"));
            }
            let pod = node.cgroup_root().join("kubepods/podaaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee/cpu.stat");
            let _ = std::fs::write(pod, &files[6]);
            let r = s.sample();
            assert_valid(&r);
            for e in &r.collector_errors {
                prop_assert!(["cpu", "memory", "network", "disk", "filesystem", "gpu", "cgroup"].contains(&e.collector.as_str()));
                prop_assert!(!e.message.is_empty());
            }
        }
    }
}
