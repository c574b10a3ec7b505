//! The GPU collector end to end through nvml-wrapper against a fake `libnvidia-ml` (C, built
//! here with `cc` from `tests/fixtures/fake-nvml/fake_nvml.c` and loaded through the
//! library-path option): healthy devices, a device that errors, unsupported optional
//! queries, a failing device count, a failing initialisation, and no library at all.
mod agent_support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use agent_support::{FixtureNode, assert_valid, usage};
use loadstar_proto::pb::Resource;
use loadstar_sampler::sampler::{Sampler, SamplerConfig};

const GIB: u64 = 1 << 30;

/// Builds the fake library into `dir`, reading its devices from `dir/devices` by default.
fn build_fake_nvml(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fake-nvml/fake_nvml.c");
    let lib = dir.join("libnvidia-ml.so.1");
    let devices = dir.join("devices");
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&lib)
        .arg(&src)
        .arg(format!(
            "-DFAKE_NVML_DEFAULT_FILE=\"{}\"",
            devices.display()
        ))
        .output()
        .expect("running cc (gcc is required for this test)");
    assert!(
        out.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    lib
}

fn gpu_config(node: &FixtureNode, lib: &Path) -> SamplerConfig {
    SamplerConfig {
        gpu: true,
        nvml_library: Some(lib.to_path_buf()),
        ..node.config()
    }
}

const HEALTHY: &str = "GPU-00000000-1111-2222-3333-444444444444|NVIDIA A100-SXM4-40GB|42949672960|10737418240|40|2|55|250000|ok";
const LOST: &str = "GPU-aaaaaaaa-1111-2222-3333-444444444444|NVIDIA A100-SXM4-40GB|42949672960|0|0|0|40|60000|utilization:15";
const NO_SENSORS: &str = "GPU-bbbbbbbb-1111-2222-3333-444444444444|Tesla T4|16106127360|8053063680|80|1|70|0|temperature:3,power:3";

#[test]
fn fake_nvml_devices_end_to_end() {
    let node = FixtureNode::new("small", None);
    let lib = build_fake_nvml(node.dir.path());
    let devices = node.dir.path().join("devices");
    std::fs::write(&devices, format!("{HEALTHY}\n{LOST}\n{NO_SENSORS}\n")).expect("write");
    let mut s = Sampler::new(gpu_config(&node, &lib)).expect("valid");

    let r = s.sample();
    assert!(r.collector_errors.is_empty(), "{:?}", r.collector_errors);
    assert_valid(&r);
    let cap = r.capacity.as_ref().expect("capacity");
    let gpus: Vec<(u32, &str, &str, u64)> = cap
        .gpus
        .iter()
        .map(|g| (g.index, g.uuid.as_str(), g.model.as_str(), g.memory_bytes))
        .collect();
    assert_eq!(
        gpus,
        vec![
            (
                0,
                "GPU-00000000-1111-2222-3333-444444444444",
                "NVIDIA A100-SXM4-40GB",
                40 * GIB
            ),
            // The lost device's static facts were readable; its utilisation was not.
            (
                1,
                "GPU-aaaaaaaa-1111-2222-3333-444444444444",
                "NVIDIA A100-SXM4-40GB",
                40 * GIB
            ),
            (
                2,
                "GPU-bbbbbbbb-1111-2222-3333-444444444444",
                "Tesla T4",
                15 * GIB
            ),
        ]
    );
    let g0 = &r.gpus[0];
    assert_eq!(
        (
            g0.utilization_ratio,
            g0.memory_used_bytes,
            g0.memory_total_bytes
        ),
        (0.4, 10 * GIB, 40 * GIB)
    );
    assert_eq!(
        (g0.process_count, g0.temperature_celsius, g0.power_watts),
        (2, 55.0, 250.0)
    );
    assert_eq!(g0.error, "");
    assert!(
        r.gpus[1]
            .error
            .starts_with("utilization: device fell off the bus"),
        "{:?}",
        r.gpus[1].error
    );
    let g2 = &r.gpus[2];
    assert_eq!(
        g2.error, "",
        "NotSupported temperature/power is not an error"
    );
    assert_eq!(
        (g2.temperature_celsius, g2.power_watts, g2.process_count),
        (0.0, 0.0, 1)
    );

    // Node figures over the healthy devices: mean(0.4, 0.8); (10 + 7.5) / (40 + 15) GiB.
    let gpu = usage(&r, Resource::Gpu).expect("gpu");
    assert!(
        (gpu.latest_ratio - 0.6).abs() < 1e-12,
        "{}",
        gpu.latest_ratio
    );
    assert_eq!(
        gpu.windows[0].sample_count, 1,
        "a level: recorded from the first sample"
    );
    let mem = usage(&r, Resource::GpuMemory).expect("gpu memory");
    assert!(
        (mem.latest_ratio - 17.5 / 55.0).abs() < 1e-12,
        "{}",
        mem.latest_ratio
    );

    // The library is re-read per sample: utilisation changes, windows grow.
    std::fs::write(
        &devices,
        format!(
            "{}\n{LOST}\n{NO_SENSORS}\n",
            HEALTHY.replace("|40|2|", "|100|2|")
        ),
    )
    .expect("write");
    let r = s.sample();
    let gpu = usage(&r, Resource::Gpu).expect("gpu");
    assert!((gpu.latest_ratio - 0.9).abs() < 1e-12);
    assert_eq!(gpu.windows[0].sample_count, 2);
    assert!((gpu.windows[0].mean_ratio - 0.75).abs() < 1e-12);

    // A failing device count fails the collector only; GPU windows are kept.
    std::fs::write(&devices, format!("count:999\n{HEALTHY}\n")).expect("write");
    let r = s.sample();
    assert_eq!(r.collector_errors.len(), 1, "{:?}", r.collector_errors);
    assert_eq!(r.collector_errors[0].collector, "gpu");
    assert_eq!(
        r.collector_errors[0].message,
        "NVML device count: an internal driver error occurred"
    );
    assert_eq!(
        usage(&r, Resource::Gpu).expect("kept").windows[0].sample_count,
        2
    );
    assert!(usage(&r, Resource::Cpu).is_some() && usage(&r, Resource::Memory).is_some());
    assert_valid(&r);
}

/// What the scorer says of `r`: its own validation, as ingest runs it.
fn scorer_accepts(r: &loadstar_proto::pb::NodeReport) {
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos(),
    )
    .expect("nanos");
    loadstar_store::validate::validate(r, &loadstar_store::validate::ReportLimits::default(), now)
        .expect("the scorer accepts the report");
}

#[test]
fn a_board_gone_or_replaced_is_named_as_itself_and_garbage_sensors_cost_nothing_else() {
    let node = FixtureNode::new("small", None);
    let lib = build_fake_nvml(node.dir.path());
    let devices = node.dir.path().join("devices");
    std::fs::write(&devices, format!("{HEALTHY}\n{NO_SENSORS}\n")).expect("write");
    let mut s = Sampler::new(gpu_config(&node, &lib)).expect("valid");
    let r = s.sample();
    assert_eq!(r.gpus.len(), 2);
    scorer_accepts(&r);
    // The first board is gone: index 0 is now the T4, and must be named as such.
    std::fs::write(&devices, format!("{NO_SENSORS}\n")).expect("write");
    let r = s.sample();
    let cap = r.capacity.as_ref().expect("capacity");
    assert_eq!(
        (
            cap.gpus.len(),
            cap.gpus[0].uuid.as_str(),
            cap.gpus[0].model.as_str()
        ),
        (1, "GPU-bbbbbbbb-1111-2222-3333-444444444444", "Tesla T4")
    );
    assert_eq!(r.gpus[0].uuid, "GPU-bbbbbbbb-1111-2222-3333-444444444444");
    // A sensor reading 255 °C and 20 kW: sent as unknown, named, and the report still
    // passes the scorer's checks (before, it refused every report of the node).
    std::fs::write(
        &devices,
        format!("{}\n", HEALTHY.replace("|55|250000|", "|255|20000000|")),
    )
    .expect("write");
    let r = s.sample();
    // Another board under the same index and count: named as itself.
    let cap = r.capacity.as_ref().expect("capacity");
    assert_eq!(
        (cap.gpus[0].uuid.as_str(), cap.gpus[0].model.as_str()),
        (
            "GPU-00000000-1111-2222-3333-444444444444",
            "NVIDIA A100-SXM4-40GB"
        )
    );
    assert_eq!(
        (r.gpus[0].temperature_celsius, r.gpus[0].power_watts),
        (0.0, 0.0)
    );
    let limits: Vec<&str> = r
        .collector_errors
        .iter()
        .filter(|e| e.collector == "limits")
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(limits.len(), 2, "{:?}", r.collector_errors);
    assert!(limits[0].contains("GPU 0 255 °C"), "{limits:?}");
    assert!(limits[1].contains("GPU 0 20000 W"), "{limits:?}");
    assert_valid(&r);
    scorer_accepts(&r);
}

#[test]
fn nvml_init_failures() {
    // No permission: an error in every report (retried later), other collectors fine.
    let node = FixtureNode::new("small", None);
    let lib = build_fake_nvml(node.dir.path());
    std::fs::write(
        node.dir.path().join("devices"),
        format!("init:4\n{HEALTHY}\n"),
    )
    .expect("write");
    let mut s = Sampler::new(gpu_config(&node, &lib)).expect("valid");
    for _ in 0..2 {
        let r = s.sample();
        assert_eq!(r.collector_errors.len(), 1, "{:?}", r.collector_errors);
        let e = &r.collector_errors[0];
        assert_eq!(e.collector, "gpu");
        assert_eq!(
            e.message,
            format!(
                "initialising NVML from {}: the current user does not have permission to perform this operation",
                lib.display()
            )
        );
        assert!(usage(&r, Resource::Gpu).is_none());
        assert!(usage(&r, Resource::Memory).is_some());
    }

    // Driver not loaded: the node has no usable GPU stack — off, not an error.
    let node = FixtureNode::new("small", None);
    let lib = build_fake_nvml(node.dir.path());
    std::fs::write(
        node.dir.path().join("devices"),
        format!("init:9\n{HEALTHY}\n"),
    )
    .expect("write");
    let mut s = Sampler::new(gpu_config(&node, &lib)).expect("valid");
    let r = s.sample();
    assert!(r.collector_errors.is_empty(), "{:?}", r.collector_errors);
    assert!(r.gpus.is_empty() && usage(&r, Resource::Gpu).is_none());
}

/// Captured log output.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn no_nvml_library_means_collector_off_with_one_info_log() {
    let node = FixtureNode::new("small", None);
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .finish();
    let reports = tracing::subscriber::with_default(subscriber, || {
        let mut s = Sampler::new(gpu_config(
            &node,
            &node.dir.path().join("no/libnvidia-ml.so.1"),
        ))
        .expect("valid");
        (0..3).map(|_| s.sample()).collect::<Vec<_>>()
    });
    for r in &reports {
        assert!(r.collector_errors.is_empty(), "{:?}", r.collector_errors);
        assert!(r.gpus.is_empty());
        assert!(r.capacity.as_ref().expect("capacity").gpus.is_empty());
        assert!(usage(r, Resource::Gpu).is_none() && usage(r, Resource::GpuMemory).is_none());
    }
    let text = String::from_utf8(logs.0.lock().expect("lock").clone()).expect("utf-8");
    let off: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("GPU collector off"))
        .collect();
    assert_eq!(off.len(), 1, "{text}");
    assert!(off[0].contains(" INFO "), "{}", off[0]);
    assert!(
        !text.contains(" WARN ") && !text.contains(" ERROR "),
        "{text}"
    );
}
