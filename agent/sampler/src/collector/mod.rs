//! Host collectors: one module per kernel data source, each split into a pure parser over
//! `&str` (testable without files) and a thin I/O wrapper that reads from an injectable root.
//!
//! Conventions shared by every collector:
//! - A missing kernel file is `Ok(None)`, not an error: the collector has nothing to say.
//! - A file that exists but cannot be read or does not parse is a [`FileError`] naming the
//!   path (and, for a parse error, the line).
//! - Counters are differenced between samples; the first sample of a counter has no rate.
//!
//! Why not `procfs-core`: it was evaluated for `/proc/stat`, `/proc/meminfo`, `/proc/net/dev`
//! and `/proc/diskstats` (its `FromRead` impls accept any reader, so injectable roots would
//! work). It does not fit here because (1) its parse failures are `InternalError`s that ask
//! the user to report a bug in procfs and carry neither the line number nor the offending
//! line; (2) `Meminfo` slices `field[..len - 1]` on arbitrary bytes, which panics on a
//! garbage non-ASCII field name, and requires a dozen fields we never use, so a truncated
//! file fails with a generic error; (3) `KernelStats` needs `ctxt`, `btime` and `processes`
//! and allocates a `CpuTime` per logical CPU per sample, and `InterfaceDeviceStatus`
//! allocates a `HashMap` and a `String` per interface (hundreds of veths on a busy node) —
//! our sampler must stay well under a millisecond. The parsers below are small, allocation
//! light, report `line N: what`, and are property-tested never to panic. `procfs-core`
//! remains a dev-dependency of the integration tests: `tests/tests/agent_live.rs` checks that
//! our parsers agree with it on this machine's files.
pub mod cgroup;
pub mod cpu;
pub mod disk;
pub mod filesystem;
pub mod gpu;
pub mod memory;
pub mod network;

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Errors of the collectors that read kernel files (cpu, memory, network, disk, cgroup):
/// which file or directory, and what went wrong with it.
#[derive(Debug, Error)]
pub enum FileError {
    /// A file exists but could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A directory exists but could not be listed (the cgroup collector's pod directories).
    #[error("listing {path}: {source}")]
    List {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A file was read but does not have the expected shape.
    #[error("parsing {path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What and where (line number and reason).
        #[source]
        source: ParseError,
    },
}

impl FileError {
    /// `path` could not be read.
    pub fn read(path: &Path, source: io::Error) -> Self {
        FileError::Read {
            path: path.to_path_buf(),
            source,
        }
    }

    /// `path` did not parse.
    pub fn parse(path: &Path, source: ParseError) -> Self {
        FileError::Parse {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A kernel file's content that does not have the expected shape.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("line {line}: {reason}")]
pub struct ParseError {
    /// 1-based line number the problem was found on (0 when it concerns the whole file).
    pub line: usize,
    /// What is wrong, quoting the offending text.
    pub reason: String,
}

impl ParseError {
    /// A problem on `line` (1-based).
    pub fn new(line: usize, reason: impl Into<String>) -> Self {
        ParseError {
            line,
            reason: reason.into(),
        }
    }
}

/// Parses an unsigned decimal field, naming it in the error.
pub(crate) fn parse_u64(token: &str, line: usize, what: &str) -> Result<u64, ParseError> {
    token.parse::<u64>().map_err(|_| {
        ParseError::new(
            line,
            format!("{what}: {:?} is not an unsigned integer", truncate(token)),
        )
    })
}

/// At most 40 characters of untrusted text for an error message.
pub(crate) fn truncate(s: &str) -> &str {
    match s.char_indices().nth(40) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Reads a whole file into `buf` (cleared first), reusing its allocation.
/// `Ok(false)` when the file does not exist.
pub(crate) fn read_into(path: &Path, buf: &mut String) -> io::Result<bool> {
    buf.clear();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_string(buf)?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Reads a small file to a string; `Ok(None)` when it does not exist.
pub(crate) fn read_optional(path: &Path) -> io::Result<Option<String>> {
    let mut buf = String::new();
    Ok(read_into(path, &mut buf)?.then_some(buf))
}

/// Difference between two readings of a monotonically increasing kernel counter.
///
/// A counter that went backwards is taken to have wrapped once if the previous reading fits
/// in 32 bits (older drivers and 32-bit kernels export `unsigned long`/`u32` counters); a
/// 64-bit counter that went backwards was reset (device re-created) and has no delta.
pub fn counter_delta(prev: u64, cur: u64) -> Option<u64> {
    if cur >= prev {
        Some(cur - prev)
    } else if prev <= u64::from(u32::MAX) {
        Some(u64::from(u32::MAX) - prev + cur + 1)
    } else {
        None
    }
}

/// Difference between two readings of a counter the kernel keeps as `unsigned long` in
/// software (`/proc/diskstats`' I/O and sector counts; not `io_ticks`, printed as a 32-bit
/// `%u`): 64 bits wide under a 64-bit agent, whose kernel is 64-bit too, so going backwards
/// there is always a reset (the device was re-created) and has no delta. Taking it for a
/// 32-bit wrap would read a delta of ~4 × 10⁹ from a reset. A 32-bit agent keeps
/// [`counter_delta`]'s wrap rule.
pub fn software_counter_delta(prev: u64, cur: u64) -> Option<u64> {
    if cfg!(target_pointer_width = "64") {
        cur.checked_sub(prev)
    } else {
        counter_delta(prev, cur)
    }
}

/// A ratio fit for the wire: finite and clamped to [0, 1]; `None` for NaN or ±∞.
pub fn clamp_ratio(x: f64) -> Option<f64> {
    if x.is_finite() {
        Some(x.clamp(0.0, 1.0))
    } else {
        None
    }
}

/// Shell-style pattern match supporting `*` (any run) and `?` (one byte), used by the
/// `--net-include` / `--net-exclude` options. Iterative with single backtracking: linear in
/// practice, no recursion, no allocation.
///
/// Why not a crate: `glob::Pattern` and `globset` also give `[`, `]`, `{` and `**` a meaning
/// (and `globset` brings `regex`), so an existing `--net-include` value could match other
/// interfaces; `wildmatch` has our two wildcards but its `?` is one `char`, not one byte, and
/// it allocates a compiled pattern. Neither is worth a dependency over these property-tested
/// lines.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let p: &[u8] = pattern.as_bytes();
    let n: &[u8] = name.as_bytes();
    let (mut pi, mut ni) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && (p[pi] == b'?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == b'*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn counter_delta_handles_wrap_and_reset() {
        assert_eq!(counter_delta(10, 15), Some(5));
        assert_eq!(counter_delta(u64::from(u32::MAX) - 1, 3), Some(5));
        assert_eq!(counter_delta(1 << 40, 7), None);
        assert_eq!(counter_delta(7, 7), Some(0));
    }

    #[test]
    fn clamp_ratio_rejects_non_finite() {
        assert_eq!(clamp_ratio(0.5), Some(0.5));
        assert_eq!(clamp_ratio(1.7), Some(1.0));
        assert_eq!(clamp_ratio(-0.1), Some(0.0));
        assert_eq!(clamp_ratio(f64::NAN), None);
        assert_eq!(clamp_ratio(f64::INFINITY), None);
    }

    #[test]
    fn glob() {
        assert!(glob_match("eth*", "eth0"));
        assert!(glob_match("*", ""));
        assert!(glob_match("en?3s*", "enp3s0"));
        assert!(!glob_match("en?s*", "enp3s0"));
        assert!(glob_match("veth*", "veth"));
        assert!(!glob_match("eth?", "eth10"));
        assert!(glob_match("*a*b", "xxaxxab"));
        assert!(!glob_match("*a*b", "xxaxxa"));
        assert!(glob_match("bond0", "bond0"));
        assert!(!glob_match("bond0", "bond01"));
    }

    #[test]
    fn truncate_is_char_safe() {
        let s = "é".repeat(50);
        assert_eq!(truncate(&s).chars().count(), 40);
        assert_eq!(truncate("short"), "short");
    }

    #[test]
    fn read_into_missing_is_false() {
        let mut buf = String::from("stale");
        assert!(!read_into(Path::new("/nonexistent/loadstar/x"), &mut buf).expect("no io error"));
        assert!(buf.is_empty());
    }

    proptest! {
        #[test]
        fn glob_star_matches_everything(s in ".{0,20}") {
            prop_assert!(glob_match("*", &s));
            prop_assert!(glob_match(&s.replace(['*', '?'], "x"), &s.replace(['*', '?'], "x")));
        }
    }
}
