//! `cpu` target: the CPU collector's parsers of `/proc/stat`, `/proc/cpuinfo` and cpufreq's
//! `cpuinfo_max_freq` (agent/sampler/src/collector/cpu.rs).
//!
//! Properties: utilisation between two parsed readings is a ratio or `None`; a reading
//! against itself has no elapsed time (`None`); frequencies are finite and non-negative.
//! An input holding a NUL byte is also read as two successive `/proc/stat` snapshots.
use loadstar_sampler::collector::cpu::{
    CpuTimes, parse_cpufreq_khz, parse_cpuinfo_max_hz, parse_proc_stat,
};

/// One input.
pub fn fuzz(data: &[u8]) {
    let text = crate::text(data);
    if let Ok(stat) = parse_proc_stat(&text) {
        let t = stat.total;
        let _ = t.busy();
        assert_eq!(t.utilization_since(&t), None, "no time passed");
        if let Some(u) = t.utilization_since(&CpuTimes::default()) {
            crate::assert_ratio("utilization since boot", u);
        }
    }
    if let Some((prev, cur)) = text.split_once('\0')
        && let (Ok(prev), Ok(cur)) = (parse_proc_stat(prev), parse_proc_stat(cur))
        && let Some(u) = cur.total.utilization_since(&prev.total)
    {
        crate::assert_ratio("utilization between readings", u);
    }
    if let Ok(hz) = parse_cpufreq_khz(&text) {
        assert!(hz.is_finite() && hz >= 0.0, "cpufreq: {hz} Hz");
    }
    if let Ok(Some(hz)) = parse_cpuinfo_max_hz(&text) {
        assert!(hz.is_finite() && hz >= 0.0, "cpuinfo: {hz} Hz");
    }
}
