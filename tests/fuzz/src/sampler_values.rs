//! `sampler_values` target: the agent's pure value handling that has no text to parse —
//! NVML device figures folded into node GPU figures (`gpu::aggregate`), `statvfs` figures
//! turned into eviction signals (`filesystem::signals`), `clamp_ratio` and CPU-time deltas
//! (agent/sampler/src/collector/{gpu,filesystem,mod,cpu}.rs). NVML itself is a C library
//! loaded at run time and is not fuzzed; the values it returns are taken from the input.
//!
//! Input layout: consecutive 34-byte device records (index u32, memory total u64, memory used
//! u64, utilisation f64 bits, process count u32, flags u16); the same bytes are also read as
//! `FsStats` (the first five u64) and as two `CpuTimes` readings (the first sixteen u64).
//!
//! Properties: node GPU figures and filesystem ratios are ratios or `None`; available bytes
//! never exceed capacity; `clamp_ratio` returns a ratio or `None` exactly for non-finite input.
use loadstar_sampler::collector::clamp_ratio;
use loadstar_sampler::collector::cpu::CpuTimes;
use loadstar_sampler::collector::filesystem::{FsStats, signals};
use loadstar_sampler::collector::gpu::{GpuDevice, aggregate};

const RECORD: usize = 34;

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    let end = b.len().min(at + 8);
    if at < end {
        x[..end - at].copy_from_slice(&b[at..end]);
    }
    u64::from_le_bytes(x)
}

fn device(r: &[u8]) -> GpuDevice {
    let u32_at = |at: usize| u64_at(r, at) as u32;
    let flags = u64_at(r, 32) as u16;
    GpuDevice {
        index: u32_at(0),
        uuid: format!("GPU-{:08x}", u32_at(0)),
        model: "fuzz".into(),
        memory_total_bytes: u64_at(r, 4),
        memory_used_bytes: u64_at(r, 12),
        utilization: f64::from_bits(u64_at(r, 20)),
        process_count: u32_at(28),
        temperature_celsius: f64::from(flags >> 8),
        power_watts: 0.0,
        error: (flags & 1 == 1).then(|| "NVML: GPU is lost".to_string()),
    }
}

/// One input.
pub fn fuzz(data: &[u8]) {
    let fs = FsStats {
        fragment_size: u64_at(data, 0),
        blocks: u64_at(data, 8),
        blocks_available: u64_at(data, 16),
        files: u64_at(data, 24),
        files_free: u64_at(data, 32),
    };
    let s = signals(&fs);
    assert!(s.available_bytes <= s.total_bytes, "{fs:?} -> {s:?}");
    if let Some(r) = s.available_ratio {
        crate::assert_ratio("nodefs available", r);
    }
    if let Some(r) = s.inodes_free_ratio {
        crate::assert_ratio("inodes free", r);
    }

    let times = |at: usize| CpuTimes {
        user: u64_at(data, at),
        nice: u64_at(data, at + 8),
        system: u64_at(data, at + 16),
        idle: u64_at(data, at + 24),
        iowait: u64_at(data, at + 32),
        irq: u64_at(data, at + 40),
        softirq: u64_at(data, at + 48),
        steal: u64_at(data, at + 56),
    };
    let (prev, cur) = (times(0), times(64));
    if let Some(u) = cur.utilization_since(&prev) {
        crate::assert_ratio("cpu utilization", u);
    }

    // Last: the known overflow in `aggregate` (fuzz/crashes/sampler_values/) aborts the
    // run, so the checks above come first.
    let devices: Vec<GpuDevice> = data.chunks(RECORD).map(device).collect();
    let (util, mem) = aggregate(&devices);
    let healthy = devices.iter().any(|d| d.error.is_none());
    if util.is_some() || mem.is_some() {
        assert!(healthy, "node GPU figures without a healthy device");
    }
    if let Some(u) = util {
        crate::assert_ratio("gpu utilization", u);
    }
    if let Some(m) = mem {
        crate::assert_ratio("gpu memory utilization", m);
    }
    for d in &devices {
        match clamp_ratio(d.utilization) {
            Some(r) => crate::assert_ratio("clamp_ratio", r),
            None => assert!(!d.utilization.is_finite()),
        }
    }
}
