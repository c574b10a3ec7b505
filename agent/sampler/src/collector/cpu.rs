//! CPU collector: utilisation of all logical CPUs from `/proc/stat` deltas, the logical CPU
//! count, and the highest CPU frequency (cpufreq `cpuinfo_max_freq`, else `/proc/cpuinfo`).
//!
//! Utilisation = Δbusy / Δtotal over the aggregate `cpu` line, where busy = user + nice +
//! system + irq + softirq + steal and total = busy + idle + iowait. `guest`/`guest_nice` are
//! already included in `user`/`nice` by the kernel and are not added again (as psutil does).
//! Each field's delta saturates at zero: aggregate `iowait` can go backwards on some kernels.
use std::path::{Path, PathBuf};

use super::{FileError, ParseError, parse_u64, read_into, read_optional, truncate};

/// Cumulative CPU time of the aggregate `cpu` line of `/proc/stat`, in USER_HZ ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTimes {
    /// Normal processes in user mode (includes guest).
    pub user: u64,
    /// Niced processes in user mode (includes guest_nice).
    pub nice: u64,
    /// Kernel mode.
    pub system: u64,
    /// Idle.
    pub idle: u64,
    /// Idle waiting for I/O.
    pub iowait: u64,
    /// Servicing interrupts.
    pub irq: u64,
    /// Servicing softirqs.
    pub softirq: u64,
    /// Stolen by the hypervisor.
    pub steal: u64,
}

impl CpuTimes {
    /// Busy ticks: everything but idle and iowait.
    pub fn busy(&self) -> u64 {
        self.user
            .saturating_add(self.nice)
            .saturating_add(self.system)
            .saturating_add(self.irq)
            .saturating_add(self.softirq)
            .saturating_add(self.steal)
    }

    /// Utilisation between two readings: Δbusy / Δtotal, each field's delta saturating at
    /// zero. `None` when no time passed (Δtotal = 0).
    pub fn utilization_since(&self, prev: &CpuTimes) -> Option<f64> {
        let d = |a: u64, b: u64| a.saturating_sub(b) as f64;
        let busy = d(self.user, prev.user)
            + d(self.nice, prev.nice)
            + d(self.system, prev.system)
            + d(self.irq, prev.irq)
            + d(self.softirq, prev.softirq)
            + d(self.steal, prev.steal);
        let total = busy + d(self.idle, prev.idle) + d(self.iowait, prev.iowait);
        (total > 0.0).then(|| (busy / total).clamp(0.0, 1.0))
    }
}

/// What the collector needs from `/proc/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// The aggregate `cpu` line.
    pub total: CpuTimes,
    /// Number of `cpuN` lines: the logical CPUs online.
    pub logical_cpus: u32,
}

/// Parses `/proc/stat`: the aggregate `cpu` line (at least user..idle; missing trailing
/// fields of old kernels are 0) and the count of `cpuN` lines.
pub fn parse_proc_stat(text: &str) -> Result<ProcStat, ParseError> {
    let mut total = None;
    let mut logical_cpus = 0u32;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let Some(rest) = line.strip_prefix("cpu") else {
            // The cpu lines come first; nothing after them concerns us.
            if total.is_some() {
                break;
            }
            continue;
        };
        if rest.starts_with(' ') {
            total = Some(parse_cpu_line(rest, n)?);
        } else {
            let id = rest.split_ascii_whitespace().next().unwrap_or("");
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
                return Err(ParseError::new(
                    n,
                    format!("malformed per-CPU line {:?}", truncate(line)),
                ));
            }
            logical_cpus += 1;
        }
    }
    let total = total.ok_or_else(|| ParseError::new(0, "no aggregate `cpu` line"))?;
    Ok(ProcStat {
        total,
        logical_cpus,
    })
}

fn parse_cpu_line(rest: &str, n: usize) -> Result<CpuTimes, ParseError> {
    const NAMES: [&str; 8] = [
        "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal",
    ];
    let mut v = [0u64; 8];
    let mut count = 0;
    for (j, tok) in rest.split_ascii_whitespace().enumerate() {
        if j < 8 {
            v[j] = parse_u64(tok, n, NAMES[j])?;
        } else {
            // guest, guest_nice: validated, not used.
            parse_u64(tok, n, "guest")?;
        }
        count = j + 1;
    }
    if count < 4 {
        return Err(ParseError::new(
            n,
            format!("aggregate `cpu` line has {count} fields, expected at least 4"),
        ));
    }
    Ok(CpuTimes {
        user: v[0],
        nice: v[1],
        system: v[2],
        idle: v[3],
        iowait: v[4],
        irq: v[5],
        softirq: v[6],
        steal: v[7],
    })
}

/// Parses a cpufreq `cpuinfo_max_freq` file (kHz) into hertz.
pub fn parse_cpufreq_khz(text: &str) -> Result<f64, ParseError> {
    let t = text.trim();
    let khz = parse_u64(t, 1, "cpuinfo_max_freq")?;
    Ok(khz as f64 * 1e3)
}

/// The highest `cpu MHz` believed (1 THz).
const MAX_CPU_MHZ: f64 = 1e6;

/// The highest `cpu MHz` in `/proc/cpuinfo`, in hertz; `None` when no line has one (e.g.
/// some ARM kernels).
pub fn parse_cpuinfo_max_hz(text: &str) -> Result<Option<f64>, ParseError> {
    let mut best: Option<f64> = None;
    for (i, line) in text.lines().enumerate() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        if key.trim() != "cpu MHz" {
            continue;
        }
        let v = value.trim();
        let mhz: f64 = v
            .parse()
            .ok()
            // ≤ 1 THz: beyond any CPU, and keeps the result in hertz finite (an `inf`
            // frequency would get every report refused; found by fuzzing).
            .filter(|x: &f64| x.is_finite() && (0.0..=MAX_CPU_MHZ).contains(x))
            .ok_or_else(|| {
                ParseError::new(
                    i + 1,
                    format!("cpu MHz: {:?} is not a plausible frequency", truncate(v)),
                )
            })?;
        best = Some(best.map_or(mhz, |b: f64| b.max(mhz)));
    }
    Ok(best.map(|mhz| mhz * 1e6))
}

/// One CPU sample.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuSample {
    /// Logical CPUs online.
    pub logical_cpus: u32,
    /// Highest frequency in hertz (0 when unknown).
    pub max_frequency_hz: f64,
    /// Utilisation since the previous sample; `None` on the first.
    pub utilization: Option<f64>,
    /// Why the frequency could not be read, if it could not (utilisation is still valid).
    pub frequency_error: Option<String>,
}

/// Re-read the (static) frequency files once every this many samples.
const FREQ_REFRESH_SAMPLES: u32 = 300;

/// Reads `/proc/stat` and the frequency files, keeping the previous counters.
#[derive(Debug)]
pub struct CpuCollector {
    stat_path: PathBuf,
    cpuinfo_path: PathBuf,
    cpu_sys_dir: PathBuf,
    prev: Option<CpuTimes>,
    buf: String,
    max_frequency_hz: Option<f64>,
    samples_since_freq: u32,
}

impl CpuCollector {
    /// A collector reading `<proc_root>/stat`, `<proc_root>/cpuinfo` and
    /// `<sys_root>/devices/system/cpu/cpuN/cpufreq/cpuinfo_max_freq`.
    pub fn new(proc_root: &Path, sys_root: &Path) -> Self {
        CpuCollector {
            stat_path: proc_root.join("stat"),
            cpuinfo_path: proc_root.join("cpuinfo"),
            cpu_sys_dir: sys_root.join("devices/system/cpu"),
            prev: None,
            buf: String::with_capacity(16 * 1024),
            max_frequency_hz: None,
            samples_since_freq: 0,
        }
    }

    /// Takes one sample; `Ok(None)` when `/proc/stat` does not exist.
    pub fn collect(&mut self) -> Result<Option<CpuSample>, FileError> {
        let path = &self.stat_path;
        let found = read_into(path, &mut self.buf).map_err(|e| FileError::read(path, e))?;
        if !found {
            return Ok(None);
        }
        let stat = parse_proc_stat(&self.buf).map_err(|e| FileError::parse(path, e))?;
        let utilization = self
            .prev
            .and_then(|prev| stat.total.utilization_since(&prev));
        self.prev = Some(stat.total);
        let mut frequency_error = None;
        if self.max_frequency_hz.is_none() || self.samples_since_freq >= FREQ_REFRESH_SAMPLES {
            match self.read_max_frequency() {
                Ok(hz) => {
                    self.max_frequency_hz = Some(hz.unwrap_or(0.0));
                    self.samples_since_freq = 0;
                }
                // Retried next sample; utilisation does not depend on it.
                Err(e) => frequency_error = Some(e.to_string()),
            }
        }
        self.samples_since_freq += 1;
        Ok(Some(CpuSample {
            logical_cpus: stat.logical_cpus,
            max_frequency_hz: self.max_frequency_hz.unwrap_or(0.0),
            utilization,
            frequency_error,
        }))
    }

    /// Highest `cpuinfo_max_freq` over all CPUs, else the highest `cpu MHz` of cpuinfo.
    fn read_max_frequency(&self) -> Result<Option<f64>, FileError> {
        let mut best: Option<f64> = None;
        if let Ok(entries) = std::fs::read_dir(&self.cpu_sys_dir) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(id) = name.to_str().and_then(|n| n.strip_prefix("cpu")) else {
                    continue;
                };
                if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
                    continue;
                }
                let path = entry.path().join("cpufreq/cpuinfo_max_freq");
                let text = read_optional(&path).map_err(|e| FileError::read(&path, e))?;
                if let Some(text) = text {
                    let hz = parse_cpufreq_khz(&text).map_err(|e| FileError::parse(&path, e))?;
                    best = Some(best.map_or(hz, |b| b.max(hz)));
                }
            }
        }
        if best.is_some() {
            return Ok(best);
        }
        let path = &self.cpuinfo_path;
        match read_optional(path).map_err(|e| FileError::read(path, e))? {
            Some(text) => parse_cpuinfo_max_hz(&text).map_err(|e| FileError::parse(path, e)),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const STAT: &str = "cpu  100 10 50 800 20 5 5 10 7 0\n\
cpu0 50 5 25 400 10 2 3 5 0 0\n\
cpu1 50 5 25 400 10 3 2 5 0 0\n\
intr 1 2 3\nctxt 99\nbtime 1\n";

    #[test]
    fn parses_stat() {
        let s = parse_proc_stat(STAT).expect("valid");
        assert_eq!(s.logical_cpus, 2);
        assert_eq!(
            s.total,
            CpuTimes {
                user: 100,
                nice: 10,
                system: 50,
                idle: 800,
                iowait: 20,
                irq: 5,
                softirq: 5,
                steal: 10
            }
        );
        assert_eq!(s.total.busy(), 180);
    }

    #[test]
    fn utilization_formula() {
        let a = parse_proc_stat(STAT).expect("valid").total;
        let mut b = a;
        b.user += 30; // busy
        b.steal += 10; // busy
        b.idle += 50;
        b.iowait += 10; // not busy
        let u = b.utilization_since(&a).expect("time passed");
        assert!((u - 40.0 / 100.0).abs() < 1e-12, "{u}");
        assert_eq!(a.utilization_since(&a), None);
        // iowait going backwards does not produce a ratio above 1 or below 0.
        let mut c = b;
        c.iowait = 0;
        c.user += 1;
        assert_eq!(c.utilization_since(&b), Some(1.0));
    }

    #[test]
    fn old_kernel_short_cpu_line() {
        let s = parse_proc_stat("cpu 1 2 3 4\ncpu0 1 2 3 4\n").expect("valid");
        assert_eq!(s.total.idle, 4);
        assert_eq!(s.total.steal, 0);
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse_proc_stat("cpu  1 2\n").expect_err("short");
        assert_eq!(
            e.to_string(),
            "line 1: aggregate `cpu` line has 2 fields, expected at least 4"
        );
        let e = parse_proc_stat("cpu  1 2 x 4\n").expect_err("garbage");
        assert_eq!(
            e.to_string(),
            "line 1: system: \"x\" is not an unsigned integer"
        );
        let e = parse_proc_stat("intr 1\n").expect_err("no cpu");
        assert_eq!(e.to_string(), "line 0: no aggregate `cpu` line");
        let e = parse_proc_stat("cpu  1 2 3 4\ncpuX 1 2 3 4\n").expect_err("bad id");
        assert_eq!(e.line, 2);
    }

    #[test]
    fn cpuinfo_and_cpufreq() {
        let text = "processor\t: 0\ncpu MHz\t\t: 2596.122\n\nprocessor\t: 1\ncpu MHz\t\t: 3100.5\n";
        assert_eq!(parse_cpuinfo_max_hz(text), Ok(Some(3100.5e6)));
        assert_eq!(parse_cpuinfo_max_hz("processor : 0\n"), Ok(None));
        assert!(parse_cpuinfo_max_hz("cpu MHz : fast\n").is_err());
        // Found by fuzzing: a finite MHz that overflows to an infinite frequency in hertz.
        assert!(parse_cpuinfo_max_hz("cpu MHz : 1e303\n").is_err());
        assert_eq!(parse_cpufreq_khz("3500000\n"), Ok(3.5e9));
        assert!(parse_cpufreq_khz("").is_err());
    }

    proptest! {
        #[test]
        fn parsers_never_panic(s in "\\PC*") {
            let _ = parse_proc_stat(&s);
            let _ = parse_cpuinfo_max_hz(&s);
            let _ = parse_cpufreq_khz(&s);
        }

        #[test]
        fn stat_like_input_never_panics(lines in prop::collection::vec("cpu[0-9 ]{0,3}( [0-9a-z]{0,22}){0,12}", 0..8)) {
            let _ = parse_proc_stat(&lines.join("\n"));
        }

        #[test]
        fn utilization_is_a_ratio(a in prop::array::uniform8(any::<u64>()), b in prop::array::uniform8(any::<u64>())) {
            let t = |v: [u64; 8]| CpuTimes { user: v[0], nice: v[1], system: v[2], idle: v[3], iowait: v[4], irq: v[5], softirq: v[6], steal: v[7] };
            if let Some(u) = t(b).utilization_since(&t(a)) {
                prop_assert!((0.0..=1.0).contains(&u));
            }
        }
    }
}
