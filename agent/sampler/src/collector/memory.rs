//! Memory collector: `/proc/meminfo` → capacity (MemTotal), used = MemTotal − MemAvailable,
//! and the kubelet's `memory.available` eviction signal (MemAvailable).
//!
//! Kernels older than 3.14 have no MemAvailable; the estimate MemFree + Buffers + Cached is
//! used then (what `free` did before 3.14), and the sample says so.
use std::path::{Path, PathBuf};

use super::{FileError, ParseError, parse_u64, read_into, truncate};

/// What the collector needs from `/proc/meminfo`, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemInfo {
    /// MemTotal.
    pub total_bytes: u64,
    /// MemAvailable (or its pre-3.14 estimate), never above `total_bytes`.
    pub available_bytes: u64,
    /// True when MemAvailable was missing and estimated as MemFree + Buffers + Cached.
    pub available_estimated: bool,
}

impl MemInfo {
    /// Used = total − available.
    pub fn used_bytes(&self) -> u64 {
        self.total_bytes - self.available_bytes
    }

    /// Used over total; `None` when MemTotal is 0.
    pub fn used_ratio(&self) -> Option<f64> {
        (self.total_bytes > 0).then(|| self.used_bytes() as f64 / self.total_bytes as f64)
    }
}

/// Parses `/proc/meminfo`. Only the lines it needs are validated (MemTotal, MemAvailable,
/// MemFree, Buffers, Cached); each must be `Key: <number> [kB]`.
pub fn parse_meminfo(text: &str) -> Result<MemInfo, ParseError> {
    let (mut total, mut available, mut free, mut buffers, mut cached) =
        (None, None, None, None, None);
    for (i, line) in text.lines().enumerate() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let slot = match key {
            "MemTotal" => &mut total,
            "MemAvailable" => &mut available,
            "MemFree" => &mut free,
            "Buffers" => &mut buffers,
            "Cached" => &mut cached,
            _ => continue,
        };
        let n = i + 1;
        let mut toks = rest.split_ascii_whitespace();
        let value = toks
            .next()
            .ok_or_else(|| ParseError::new(n, format!("{key}: no value")))?;
        let value = parse_u64(value, n, key)?;
        let bytes = match toks.next() {
            None => value,
            Some("kB") => value.saturating_mul(1024),
            Some(unit) => {
                return Err(ParseError::new(
                    n,
                    format!("{key}: unknown unit {:?}", truncate(unit)),
                ));
            }
        };
        *slot = Some(bytes);
    }
    let total = total.ok_or_else(|| ParseError::new(0, "MemTotal missing"))?;
    let (available, estimated) = match available {
        Some(a) => (a, false),
        None => match (free, buffers, cached) {
            (Some(f), Some(b), Some(c)) => (f.saturating_add(b).saturating_add(c), true),
            _ => {
                return Err(ParseError::new(
                    0,
                    "MemAvailable missing and MemFree/Buffers/Cached incomplete",
                ));
            }
        },
    };
    Ok(MemInfo {
        total_bytes: total,
        available_bytes: available.min(total),
        available_estimated: estimated,
    })
}

/// Reads `<proc_root>/meminfo`.
#[derive(Debug)]
pub struct MemoryCollector {
    path: PathBuf,
    buf: String,
}

impl MemoryCollector {
    /// A collector reading `<proc_root>/meminfo`.
    pub fn new(proc_root: &Path) -> Self {
        MemoryCollector {
            path: proc_root.join("meminfo"),
            buf: String::with_capacity(4096),
        }
    }

    /// Takes one sample; `Ok(None)` when the file does not exist.
    pub fn collect(&mut self) -> Result<Option<MemInfo>, FileError> {
        let path = &self.path;
        if !read_into(path, &mut self.buf).map_err(|e| FileError::read(path, e))? {
            return Ok(None);
        }
        parse_meminfo(&self.buf)
            .map(Some)
            .map_err(|e| FileError::parse(path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_meminfo() {
        let m = parse_meminfo(
            "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    4000000 kB\nBuffers: 10 kB\nCached: 20 kB\nHugePages_Total:       0\n",
        )
        .expect("valid");
        assert_eq!(m.total_bytes, 16_000_000 * 1024);
        assert_eq!(m.available_bytes, 4_000_000 * 1024);
        assert!(!m.available_estimated);
        assert_eq!(m.used_ratio(), Some(0.75));
    }

    #[test]
    fn old_kernel_estimate() {
        let m = parse_meminfo("MemTotal: 100 kB\nMemFree: 10 kB\nBuffers: 5 kB\nCached: 15 kB\n")
            .expect("valid");
        assert_eq!(m.available_bytes, 30 * 1024);
        assert!(m.available_estimated);
    }

    #[test]
    fn errors() {
        assert_eq!(
            parse_meminfo("MemFree: 1 kB\n")
                .expect_err("no total")
                .to_string(),
            "line 0: MemTotal missing"
        );
        assert_eq!(
            parse_meminfo("MemTotal:\n").expect_err("empty").to_string(),
            "line 1: MemTotal: no value"
        );
        assert_eq!(
            parse_meminfo("MemTotal: 1 kB\nMemAvailable: lots kB\n")
                .expect_err("garbage")
                .to_string(),
            "line 2: MemAvailable: \"lots\" is not an unsigned integer"
        );
        assert!(parse_meminfo("MemTotal: 1 MB\n").is_err());
        // A garbage non-ASCII key (which makes procfs-core panic) is simply not ours.
        assert!(parse_meminfo("é: 1\nMemTotal: 4 kB\nMemAvailable: 1 kB\n").is_ok());
    }

    #[test]
    fn available_never_exceeds_total() {
        let m = parse_meminfo("MemTotal: 1 kB\nMemAvailable: 9 kB\n").expect("valid");
        assert_eq!(m.used_ratio(), Some(0.0));
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC*") {
            if let Ok(m) = parse_meminfo(&s) {
                prop_assert!(m.available_bytes <= m.total_bytes);
            }
        }

        #[test]
        fn ratio_in_unit_interval(total in any::<u64>(), avail in any::<u64>()) {
            let text = format!("MemTotal: {total}\nMemAvailable: {avail}\n");
            let m = parse_meminfo(&text).expect("valid");
            if let Some(r) = m.used_ratio() {
                prop_assert!((0.0..=1.0).contains(&r));
            }
        }
    }
}
